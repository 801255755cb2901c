"""Runs the whole test suite once per Keras backend, each in its own process.

Usage: python tests/run_backends.py [--jobs N] [BACKEND ...] [-- PYTEST_ARGS ...]

Each backend runs the suite in two parts (`PARTS`), each part a pytest process; up to `--jobs`
of them (default: one per CPU core) run at the same time, the longest first. Most tests are
small models whose time goes to one core's Python and dispatch, so on two cores two parts take
little longer than one. Each part's output is printed whole when it ends. With PYTEST_ARGS a
backend runs as one process: `pytest PYTEST_ARGS` (the whole suite unless they name paths).
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

BACKENDS = ("jax", "tensorflow", "torch")  # the longest first
PARTS = {"training": ("tests/training",), "the rest": ("tests", "--ignore=tests/training")}  # about equal
DEFAULT_ARGS = ("--durations=30",)  # the slowest tests of each backend, for keeping CI time down
COUNT = re.compile(r"(\d+) (passed|failed|skipped|error|errors)\b")


def run(backend, part, paths, pytest_args):
    """Runs pytest on `paths` under `backend`; prints its output when it ends and returns the counts."""
    env = {**os.environ, "KERAS_BACKEND": backend}
    command = [sys.executable, "-m", "pytest", *paths, *DEFAULT_ARGS, *pytest_args]
    print(f"=== KERAS_BACKEND={backend} ({part}): started {' '.join(command)}", flush=True)
    start = time.time()
    with tempfile.TemporaryFile("w+") as log:
        returncode = subprocess.run(command, env=env, stdout=log, stderr=subprocess.STDOUT, text=True).returncode
        log.seek(0)
        output = log.read()
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    tail = output.strip().splitlines()[-1:] or [""]
    for number, word in COUNT.findall(tail[0]):
        counts["failed" if word.startswith("error") else word] += int(number)
    if returncode not in (0, 5) and counts["failed"] == 0:
        counts["failed"] = 1  # pytest itself failed (collection error, crash)
    sys.stdout.write(f"\n=== KERAS_BACKEND={backend} ({part}) output\n{output}")
    print(f"=== {backend}, {part}: {counts} in {time.time() - start:.0f}s", flush=True)
    return counts


def parse(argv):
    split = argv.index("--") if "--" in argv else len(argv)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                        help="pytest processes at the same time (default: one per core)")
    parser.add_argument("backends", nargs="*", metavar="BACKEND", help=f"some of {', '.join(BACKENDS)} (default: all)")
    args = parser.parse_args(argv[:split])
    unknown = sorted(set(args.backends) - set(BACKENDS))
    if unknown:
        parser.error(f"unknown backend(s) {', '.join(unknown)}; expected some of {', '.join(BACKENDS)}")
    if args.jobs < 1:
        parser.error(f"--jobs {args.jobs}: must be at least 1")
    return args.jobs, args.backends or list(BACKENDS), argv[split + 1 :]


def main(argv):
    jobs, backends, pytest_args = parse(argv)
    parts = {"as given": ()} if pytest_args else PARTS  # no path given: pytest's testpaths, "tests"
    runs = [(backend, part, paths) for backend in backends for part, paths in parts.items()]
    start = time.time()
    with ThreadPoolExecutor(jobs) as pool:
        results = list(pool.map(lambda job: run(*job, pytest_args), runs))
    totals = {key: sum(counts[key] for counts in results) for key in ("passed", "failed", "skipped")}
    print(f"\n{totals['passed']} passed, {totals['failed']} failed, {totals['skipped']} skipped "
          f"({len(backends)} backends, {len(runs)} processes, {min(jobs, len(runs))} at a time, "
          f"{time.time() - start:.0f}s)")
    return 1 if totals["failed"] or not totals["passed"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
