"""One benchmarked model in its own process, driven by `throughput.py` over stdin/stdout.

Usage: KERAS_BACKEND=... python benchmarks/worker.py '<json config>'

The worker builds the model, runs the warm-up steps (compilation included), prints
`@@bench ready {...}` and then, for every `run N` line on stdin, runs N steps and prints
`@@bench done <seconds>`; `quit` ends it. Only lines starting with `@@bench` are protocol.
"""

import json
import os
import sys
import time

PREFIX = "@@bench"


def _reply(kind, payload):
    sys.stdout.write(f"{PREFIX} {kind} {json.dumps(payload)}\n")
    sys.stdout.flush()


def main(cfg):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    from frameworks import make_runner

    start = time.perf_counter()
    runner = make_runner(cfg)
    step = runner.infer if cfg["mode"] == "inference" else runner.train
    built = time.perf_counter()
    for _ in range(cfg["warmup"]):
        step()
    ready = time.perf_counter()
    _reply("ready", {"build_s": built - start, "warmup_s": ready - built, "pid": os.getpid()})
    for line in sys.stdin:
        command = line.split()
        if not command or command[0] == "quit":
            break
        steps = int(command[1])
        begin = time.perf_counter()
        for _ in range(steps):
            step()
        _reply("done", {"seconds": time.perf_counter() - begin, "steps": steps})


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
