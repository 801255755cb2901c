"""benchmarks/throughput.py: its FLOP count and one tiny run on this test's backend."""

import json
import os
import subprocess
import sys

import pytest

from tests.support import BACKEND
from tests.support.benchmarks import BENCHMARKS

import throughput  # noqa: E402  (benchmarks/ is on sys.path via tests.support.benchmarks)

H100_BF16_FLOPS = 989e12  # SPEC: ~28k img/s B/16 inference, ~9.4k training at 100 %


@pytest.mark.backend_independent  # arithmetic
def test_flops_per_image_match_the_published_peak_throughputs():
    forward = throughput.flops_per_image("ViTB16", 224)
    assert H100_BF16_FLOPS / forward == pytest.approx(28_000, rel=0.02)
    assert H100_BF16_FLOPS / (3 * forward) == pytest.approx(9_400, rel=0.02)
    # timm's published GMACs (one multiply-add = 2 FLOPs): L/16 61.6, H/14 167.4.
    assert throughput.flops_per_image("ViTL16", 224) / 2e9 == pytest.approx(61.6, rel=0.01)
    assert throughput.flops_per_image("ViTH14", 224) / 2e9 == pytest.approx(167.4, rel=0.01)


def test_throughput_script_measures_keras_vit_on_this_backend(tmp_path):
    out = tmp_path / "result.json"
    command = [
        sys.executable, os.path.join(BENCHMARKS, "throughput.py"), "--variant", "ViTTi16",
        "--resolution", "32", "--batch", "2", "--rounds", "2", "--warmup", "1",
        "--frameworks", f"keras_vit/{BACKEND}", "--peak-tflops", "1", "--json", str(out),
    ]
    run = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    report = json.loads(out.read_text())
    results = {r["mode"]: r for r in report["results"]}
    assert set(results) == {"inference", "training"}
    for result in results.values():
        assert result["error"] is None and len(result["rounds"]) == 2 and result["images_per_s"] > 0
    assert f"| keras_vit/{BACKEND} | float32 |" in run.stdout
    assert "% of 1" in run.stdout


def test_unknown_framework_is_refused():
    with pytest.raises(SystemExit, match="Unknown framework 'keras_vit/mxnet'"):
        throughput.resolve_frameworks(["keras_vit/mxnet"])
