"""benchmarks/torch_profile.py: one quick run on PyTorch, and the refusal of other backends."""

import os
import subprocess
import sys

import pytest

from tests.support import BACKEND
from tests.support.benchmarks import BENCHMARKS

SCRIPT = os.path.join(BENCHMARKS, "torch_profile.py")


def run_script(*args, backend):
    env = {**os.environ, "KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "3"}
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True, env=env, timeout=600)


@pytest.mark.skipif(BACKEND != "torch", reason="profiles the PyTorch backend")
def test_quick_profile_splits_both_steps():
    run = run_script("--quick", "--steps", "1", "--warmup", "1", backend="torch")
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    rows = {line.split(" | ")[1]: line for line in run.stdout.splitlines() if line.startswith("| float32 |")}
    assert set(rows) == {"inference", "training"}
    for mode, row in rows.items():
        cells = row.strip("| ").split(" | ")
        step_ms, profiled_ms = float(cells[2]), float(cells[4])
        parts = [float(cell.split()[0]) for cell in cells[5:11]]
        assert step_ms > 0 and sum(parts) == pytest.approx(profiled_ms, rel=0.02, abs=0.35)
        assert (parts[2] > 0) == (mode == "training")  # the optimizer's share
        assert cells[11] == "10" and "scaled_dot_product" in cells[-1]  # the model's own layer calls


def test_other_backends_are_refused():
    run = run_script("--quick", backend="jax")
    assert run.returncode == 2 and "KERAS_BACKEND='jax'" in run.stderr and "Traceback" not in run.stderr
