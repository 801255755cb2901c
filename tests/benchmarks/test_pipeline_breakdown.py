"""benchmarks/pipeline_breakdown.py: one tiny run."""

import os
import re
import subprocess
import sys

import pytest

from tests.support import BACKEND
from tests.support.benchmarks import BENCHMARKS

SCRIPT = os.path.join(BENCHMARKS, "pipeline_breakdown.py")
STEPS = ("decode limit (whole image)", "crop window decoded", "+ antialiased resize", "+ flip",
         "+ uint8 (the finetune transform)", "crop window + plain bilinear (floor)")


@pytest.mark.skipif(BACKEND != "tensorflow", reason="a tf.data benchmark: measured once, under TensorFlow")
def test_each_step_of_the_finetune_transform_against_the_decode_limit():
    run = subprocess.run([sys.executable, SCRIPT, "--resolutions", "32", "--images", "2", "--rounds", "1"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    rows = re.findall(r"^\| 32 \| (.+?) \| ([\d.]+) \| ([\d.]+) \|$", run.stdout, flags=re.M)
    assert [name for name, _, _ in rows] == list(STEPS)
    assert rows[0][2] == "1.00" and all(float(ms) > 0 for _, ms, _ in rows)


@pytest.mark.backend_independent  # argument checks, before any backend is used
def test_bad_arguments_are_refused():
    run = subprocess.run([sys.executable, SCRIPT, "--rounds", "0"], capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and "--rounds must be >= 1" in run.stderr
