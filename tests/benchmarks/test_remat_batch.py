"""benchmarks/remat_batch.py: its search, and one tiny run on this test's backend."""

import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

from tests.support import BACKEND
from tests.support.benchmarks import BENCHMARKS

import remat_batch  # noqa: E402  (benchmarks/ is on sys.path via tests.support.benchmarks)


@pytest.mark.backend_independent  # the search's arithmetic
def test_search_doubles_then_bisects_to_the_largest_batch(monkeypatch):
    limits = {False: 40, True: 150}
    tried = []

    def trains(batch, remat, args):
        tried.append((remat, batch))
        return (True, 10.0 * batch) if batch <= limits[remat] else (False, None)

    monkeypatch.setattr(remat_batch, "trains", trains)
    args = SimpleNamespace(start=8, max_batch=1024, granularity=8)
    assert remat_batch.largest_batch(False, args) == (40, 400.0, False)
    assert remat_batch.largest_batch(True, args) == (144, 1440.0, False)
    assert remat_batch.largest_batch(True, SimpleNamespace(start=8, max_batch=64, granularity=8)) == (64, 640.0, True)
    assert (False, 64) in tried and (False, 48) in tried and (False, 40) in tried


def test_remat_batch_script_runs_on_this_backend():
    command = [sys.executable, os.path.join(BENCHMARKS, "remat_batch.py"), "--variant", "ViTTi16",
               "--resolution", "32", "--start", "2", "--max-batch", "2", "--remat", "on"]
    run = subprocess.run(command, capture_output=True, text=True, timeout=900, env={**os.environ, "KERAS_BACKEND": BACKEND})
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert "| on | 2 (--max-batch) |" in run.stdout and "| off |" not in run.stdout
