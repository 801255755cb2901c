"""Runs the whole test suite once per Keras backend, each in its own process.

Usage: python tests/run_backends.py [BACKEND ...] [-- PYTEST_ARGS ...]
"""

import os
import re
import subprocess
import sys
import time

BACKENDS = ("tensorflow", "jax", "torch")
DEFAULT_ARGS = ("--durations=30",)  # the slowest tests of each backend, for keeping CI time down
COUNT = re.compile(r"(\d+) (passed|failed|skipped|error|errors)\b")


def run(backend, pytest_args):
    env = {**os.environ, "KERAS_BACKEND": backend}
    command = [sys.executable, "-m", "pytest", "tests", *DEFAULT_ARGS, *pytest_args]
    print(f"\n=== KERAS_BACKEND={backend}: {' '.join(command)}", flush=True)
    start = time.time()
    proc = subprocess.run(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    sys.stdout.write(proc.stdout)
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    tail = proc.stdout.strip().splitlines()[-1:] or [""]
    for number, word in COUNT.findall(tail[0]):
        counts["failed" if word.startswith("error") else word] += int(number)
    if proc.returncode not in (0, 5) and counts["failed"] == 0:
        counts["failed"] = 1  # pytest itself failed (collection error, crash)
    print(f"=== {backend}: {counts} in {time.time() - start:.0f}s", flush=True)
    return counts


def main(argv):
    if "--" in argv:
        split = argv.index("--")
        backends, pytest_args = argv[:split], argv[split + 1 :]
    else:
        backends, pytest_args = argv, []
    backends = backends or list(BACKENDS)
    unknown = set(backends) - set(BACKENDS)
    if unknown:
        sys.exit(f"Unknown backend(s) {sorted(unknown)}; expected some of {BACKENDS}.")
    totals = {"passed": 0, "failed": 0, "skipped": 0}
    for backend in backends:
        for key, value in run(backend, pytest_args).items():
            totals[key] += value
    print(f"\n{totals['passed']} passed, {totals['failed']} failed, {totals['skipped']} skipped")
    return 1 if totals["failed"] or not totals["passed"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
