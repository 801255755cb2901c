"""The suite's own settings (tests/conftest.py) leave the numbers checked as users get them: XLA
compiling with LLVM's -O1, for shorter compiles, gives the weights and outputs of its default
optimisation level bit for bit."""

import os
import re
import subprocess
import sys

import numpy as np
import pytest

from tests.support import BACKEND
from tests.support.compiled_step import trained

SCRIPT = os.path.join(os.path.dirname(__file__), "support", "compiled_step.py")
OPT_LEVEL = re.compile(r"--xla_backend_optimization_level=\S+")


@pytest.mark.skipif(BACKEND != "jax", reason="the setting is XLA's, and JAX compiles every step with it")
def test_the_suites_xla_optimisation_level_gives_the_defaults_numbers(tmp_path):
    flags = os.environ.get("XLA_FLAGS", "")
    assert OPT_LEVEL.search(flags), f"the suite sets XLA's optimisation level (XLA_FLAGS={flags!r})"
    env = {**os.environ, "XLA_FLAGS": OPT_LEVEL.sub("", flags).strip()}
    run = subprocess.run([sys.executable, SCRIPT, str(tmp_path / "default.npz")], env=env, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    ours, default = trained(), np.load(tmp_path / "default.npz")
    assert sorted(ours) == sorted(default.files)
    for name, value in ours.items():
        np.testing.assert_array_equal(value, default[name], err_msg=name)
