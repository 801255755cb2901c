"""One benchmarked model in its own process, driven by `throughput.py` over stdin/stdout.

Usage: KERAS_BACKEND=... python benchmarks/worker.py '<json config>'

The worker builds the model, runs the warm-up steps (compilation included), prints
`@@bench ready {...}` (with `release_memory`: after giving back the GPU memory PyTorch keeps
cached, again after each run, which then starts with one untimed step) and then, for every `run N` line on stdin, runs N steps and prints
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


def steps_function(runner, mode):
    """`run(n)`: n steps of `runner` in `mode`, through its own loop (`fit`) where it has one."""
    many = getattr(runner, "infer_steps" if mode == "inference" else "train_steps", None)
    if many is not None:
        return many
    one = runner.infer if mode == "inference" else runner.train

    def run(n):
        for _ in range(n):
            one()

    return run


def release_memory():
    """Gives the PyTorch caching allocator's free GPU memory back, so that the idle workers
    of one call (benchmarks/targets.py) hold only their weights and optimizer state."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        torch.cuda.empty_cache()


def main(cfg):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    limit_threads(cfg.get("threads"))
    from frameworks import make_runner

    start = time.perf_counter()
    runner = make_runner(cfg)
    steps = steps_function(runner, cfg["mode"])
    built = time.perf_counter()
    if cfg["warmup"]:
        steps(cfg["warmup"])
    ready = time.perf_counter()
    release = cfg.get("release_memory")
    if release:
        release_memory()
    _reply("ready", {"build_s": built - start, "warmup_s": ready - built, "pid": os.getpid()})
    for line in sys.stdin:
        command = line.split()
        if not command or command[0] == "quit":
            break
        count = int(command[1])
        if release:
            steps(1)  # untimed: the memory given back is allocated again
        begin, begin_cpu = time.perf_counter(), time.process_time()
        steps(count)
        cpu = time.process_time() - begin_cpu
        _reply("done", {"seconds": time.perf_counter() - begin, "cpu_seconds": cpu, "steps": count})
        if release:
            release_memory()


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
