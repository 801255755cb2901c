"""benchmarks/jax_gpu_profile.py: one tiny run on the CPU (the script measures the JAX backend)."""

import os
import re
import subprocess
import sys

import pytest

from tests.support import BACKEND
from tests.support.benchmarks import BENCHMARKS

SCRIPT = os.path.join(BENCHMARKS, "jax_gpu_profile.py")


@pytest.mark.skipif(BACKEND != "jax", reason="the script measures the JAX backend only")
def test_variants_against_the_plain_jax_vit_with_their_programs():
    command = [sys.executable, SCRIPT, "--variant", "ViTTi16", "--resolution", "32", "--batch", "2", "--steps", "1",
               "--rounds", "1", "--modes", "inference", "--keras-variants", "shipped", "bf16 stream",
               "Pallas dense+GELU"]
    run = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    rows = dict(re.findall(r"^\| inference: (.+?) \| [\d,]+ \| ([\d.]+)x \|$", run.stdout, flags=re.M))
    assert set(rows) == {"keras_vit shipped", "keras_vit bf16 stream", "keras_vit Pallas dense+GELU", "jax_vit"}
    assert rows["jax_vit"] == "1.00"
    assert re.search(r"^inference: keras_vit shipped: .*fusion \d+", run.stdout, flags=re.M)  # the program's census
    # no GPU here: Keras says why its attention is XLA's, and the padded cuDNN probe declines
    assert re.search(r"^Keras' inference attention for q/k/v \(2, 5, 3, 64\): XLA attention \(", run.stdout, flags=re.M)
    assert "padded cuDNN probe: None" in run.stdout


@pytest.mark.backend_independent  # argument checks, before any backend is used
def test_bad_arguments_are_refused():
    run = subprocess.run([sys.executable, SCRIPT, "--steps", "0"], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "KERAS_BACKEND": "jax"})
    assert run.returncode == 2 and "--steps must be >= 1" in run.stderr


@pytest.mark.skipif(BACKEND != "jax", reason="the script measures the JAX backend only")
def test_a_variant_that_fails_is_reported_and_left_out(monkeypatch, capsys):
    from types import SimpleNamespace

    import jax_gpu_profile

    def keras_case(args, mode, name, images, labels):
        raise RuntimeError("Triton refused the kernel")

    monkeypatch.setattr(jax_gpu_profile, "keras_case", keras_case)
    args = SimpleNamespace(modes=["inference"], keras_variants=["Pallas dense+GELU"], variant="ViTTi16",
                           resolution=32, batch=2)
    images, labels = jax_gpu_profile.np.zeros((2, 32, 32, 3), "float32"), jax_gpu_profile.np.zeros(2, "int32")
    assert list(jax_gpu_profile.cases(args, images, labels)) == ["inference: jax_vit"]
    assert "inference: keras_vit Pallas dense+GELU: FAILED (RuntimeError: 'Triton refused the kernel')" in capsys.readouterr().out
