"""benchmarks/targets.py: its argument checks, its ratio table, and one tiny run on the CPU."""

import json
import os
import re
import subprocess
import sys

import pytest

from tests.support import BACKEND
from tests.support.benchmarks import BENCHMARKS

import targets  # noqa: E402  (benchmarks/ is on sys.path via tests.support.benchmarks)

SCRIPT = os.path.join(BENCHMARKS, "targets.py")


@pytest.mark.backend_independent  # argument checks
@pytest.mark.parametrize("arguments, message", [
    (["--steps", "0"], "--steps must be positive"),
    (["--warmup", "0"], "--warmup must be >= 1"),
    (["--frameworks", "keras_vit/mxnet"], "unknown framework(s) keras_vit/mxnet"),
    (["--errors", "tensorflow"], "invalid choice: 'tensorflow'"),
])
def test_bad_arguments_exit_2(arguments, message):
    run = subprocess.run([sys.executable, SCRIPT, *arguments], capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and message in run.stderr, run.stderr[-2000:]


@pytest.mark.backend_independent  # arithmetic
def test_ratio_table_against_the_targets():
    def row(framework, variant, mode, speed, warm_up):
        return {"framework": framework, "variant": variant, "mode": mode, "images_per_s": speed,
                "setup": {"warmup_s": warm_up}}

    results = [row("keras_vit/jax", "ViTB16", "training", 3600.0, 20.0),
               row("timm/compiled", "ViTB16", "training", 3000.0, 30.0),
               row("keras_vit/torch/compiled", "ViTB16", "training", 3150.0, 60.0)]
    table = targets.ratio_table(results, {"jax": {"float32": 1e-6, "mixed_bfloat16": 9e-3, "autocast": 8e-3}})
    assert "| B/16 training, JAX fit / timm compiled | 3,600.0 img/s | 3,000.0 img/s | 1.20x | >= 1.0 | yes |" in table
    assert "| B/16 training, PyTorch jit_compile / timm compiled | 3,150.0 img/s | 3,000.0 img/s | 1.05x | >= 1.1 | no |" in table
    assert "| B/16 training warm-up, PyTorch jit_compile / timm compiled | 60.0 s | 30.0 s | 2.00x | <= 1.5 | no |" in table
    assert "| L/16 training, JAX fit / timm compiled | - | - | - | >= 1.0 | - |" in table  # not measured
    assert "| float32 vs float64, jax | 1.00e-06 | | | <= 1e-05 | yes |" in table
    assert "| bf16 error / autocast's, jax | 9.00e-03 | 8.00e-03 | 1.12x | <= 1.0 | no |" in table


@pytest.mark.skipif(BACKEND == "tensorflow", reason="the rows are JAX and PyTorch ones")
def test_tiny_run_writes_rows_errors_and_the_ratio_table(tmp_path):
    out = tmp_path / "targets.json"
    command = [sys.executable, SCRIPT, "--quick", "--frameworks", f"keras_vit/{BACKEND}", "--errors", BACKEND,
               "--error-images", "2", "--steps", "1", "--rounds", "1", "--warmup", "1", "--budget", "800", "--json", str(out)]
    run = subprocess.run(command, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    report = json.loads(out.read_text())
    rows = {(r["framework"], r["mode"]): r for r in report["results"]}
    modes = {"jax": {"training", "inference"}, "torch": {"training"}}[BACKEND]
    assert set(rows) == {(f"keras_vit/{BACKEND}", mode) for mode in modes}
    for r in rows.values():
        assert r["error"] is None and r["images_per_s"] > 0 and r["setup"]["warmup_s"] > 0
    assert report["errors"][BACKEND]["float32"] < 1e-5 and report["errors"][BACKEND]["autocast"] > 0
    assert run.stdout.rstrip().splitlines()[-1].startswith(f"| bf16 error / autocast's, {BACKEND} |")  # the table last
    assert re.search(r"^\| B/16 training, JAX fit / timm compiled \| ", run.stdout, flags=re.M)


@pytest.mark.backend_independent  # a shell script
@pytest.mark.parametrize("stage", [[], ["nope"], ["targets|training"]])
def test_gpu_sh_refuses_an_unknown_stage_before_doing_anything(stage, tmp_path):
    run = subprocess.run(["bash", os.path.join(BENCHMARKS, "gpu.sh"), *stage], capture_output=True, text=True,
                         timeout=60, cwd=tmp_path, env={**os.environ, "OUT": str(tmp_path / "out")})
    assert run.returncode == 2 and "usage: bash benchmarks/gpu.sh targets|training|" in run.stderr
    assert not (tmp_path / "out").exists()
