"""One benchmarked model in its own process, driven by `throughput.py` over stdin/stdout.

Usage: KERAS_BACKEND=... python benchmarks/worker.py '<json config>'

The worker builds the model, runs the warm-up steps (compilation included), prints
`@@bench ready {...}` and then, for every `run N` line on stdin, runs N steps and prints
`@@bench done {seconds, cpu_seconds, steps}`; `quit` ends it. Only lines starting with `@@bench` are protocol.
"""

import json
import os
import sys
import time

PREFIX = "@@bench"


def _reply(kind, payload):
    sys.stdout.write(f"{PREFIX} {kind} {json.dumps(payload)}\n")
    sys.stdout.flush()


def limit_threads(threads):
    """Pins the process to `threads` cores and sizes the libraries' thread pools to match."""
    if not threads:
        return
    os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:threads])
    if threads == 1:
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false").strip()
    backend = os.environ.get("KERAS_BACKEND")
    if backend == "torch":
        import torch

        torch.set_num_threads(threads)
    elif backend == "tensorflow":
        import tensorflow as tf

        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(threads)


def main(cfg):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    limit_threads(cfg.get("threads"))
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
        begin, begin_cpu = time.perf_counter(), time.process_time()
        for _ in range(steps):
            step()
        cpu = time.process_time() - begin_cpu
        _reply("done", {"seconds": time.perf_counter() - begin, "cpu_seconds": cpu, "steps": steps})


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
