"""benchmarks/step_overhead.py: one tiny run (the script always runs the JAX backend)."""

import os
import re
import subprocess
import sys

import pytest

from tests.support import BACKEND
from tests.support.benchmarks import BENCHMARKS


@pytest.mark.skipif(BACKEND != "jax", reason="the script measures the JAX backend only")
def test_step_overhead_table_and_hlo_counts():
    """Inference cases and the compiled training programs (the training cases build 9 models: slow)."""
    command = [sys.executable, os.path.join(BENCHMARKS, "step_overhead.py"), "--models", "tiny", "--batch", "4",
               "--steps", "1", "--fit-steps", "2", "--rounds", "1", "--modes", "inference", "--hlo"]
    run = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    rows = dict(re.findall(r"^\| (.+?) \| [\d.]+ \| ([\d.]+)x \|$", run.stdout, flags=re.M))
    assert rows["bare jit stateless_call"] == "1.00"
    paths = ("bare, output to NumPy each step", "predict_on_batch numpy", "predict_on_batch device", "predict numpy")
    assert all(float(rows[path]) > 0 for path in paths)
    counts = re.search(r"keras train_step: instructions (\d+).*bare step: instructions (\d+), .* dots (\d+)", run.stdout)
    assert counts and int(counts[1]) > 0 and int(counts[2]) > 0 and int(counts[3]) > 0


@pytest.mark.backend_independent  # argument checks, before any backend is used
def test_bad_arguments_are_refused():
    run = subprocess.run([sys.executable, os.path.join(BENCHMARKS, "step_overhead.py"), "--steps", "0"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 2 and "--steps must be >= 1" in run.stderr
