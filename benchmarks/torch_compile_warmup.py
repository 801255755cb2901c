"""Warm-up of `jit_compile=True` on PyTorch: seconds and dynamo recompiles, plain Keras against
keras_vit's `compile_once` (issue 25, part 2).

    KERAS_BACKEND=torch python benchmarks/torch_compile_warmup.py --rounds 2

The issue's tiny ViT (`VisionTransformer(8, 64, 2, 2, 128, input_shape=(32, 32, 3))`, AdamW,
`compile(jit_compile=True)`, inductor), batch 8 of NumPy arrays: two `train_on_batch` then two
`predict_on_batch` are the warm-up; then `--steps` more of each are timed. "plain" is the same
model re-wrapped as a plain `keras.Model` (what Keras does without keras_vit's fix). Each run is
a fresh process with an empty inductor cache; the two kinds alternate, `--rounds` times.
"""

import argparse
import json
import logging
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))


class _RecompileCounter(logging.Handler):
    def __init__(self):
        super().__init__()
        self.count = 0

    def emit(self, record):
        self.count += "Recompiling function" in record.getMessage()


def measure(kind, steps):
    """Child process: warm-up seconds, recompiles, compiled frames and steady step time."""
    import keras
    import numpy as np
    import torch
    from torch._dynamo.utils import counters

    import keras_vit

    torch._logging.set_logs(recompiles=True)
    counter = _RecompileCounter()
    logging.getLogger("torch._dynamo.guards.__recompiles").addHandler(counter)
    model = keras_vit.VisionTransformer(8, 64, 2, 2, 128, input_shape=(32, 32, 3))
    if kind == "plain":
        model = keras.Model(model.inputs, model.outputs)
    model.compile(optimizer=keras.optimizers.AdamW(), loss="sparse_categorical_crossentropy", jit_compile=True)
    rng = np.random.default_rng(0)
    x, y = rng.uniform(size=(8, 32, 32, 3)).astype("float32"), rng.integers(0, 1000, 8)
    start = time.perf_counter()
    for _ in range(2):
        model.train_on_batch(x, y)
    for _ in range(2):
        model.predict_on_batch(x)
    warm_up = time.perf_counter() - start
    warm = (counter.count, counters["frames"]["total"])
    start = time.perf_counter()
    for _ in range(steps):
        model.train_on_batch(x, y)
        model.predict_on_batch(x)
    step = (time.perf_counter() - start) / steps
    return {
        "kind": kind, "warm_up_s": warm_up, "recompiles": warm[0], "frames": warm[1],
        "later_recompiles": counter.count - warm[0], "train_plus_predict_ms": 1000 * step,
    }


def run(kind, steps):
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, KERAS_BACKEND="torch", TORCHINDUCTOR_CACHE_DIR=cache, TF_CPP_MIN_LOG_LEVEL="3")
        child = subprocess.run(
            [sys.executable, __file__, "--child", kind, "--steps", str(steps)], capture_output=True, text=True, env=env
        )
    if child.returncode:
        raise SystemExit(f"{kind} failed:\n{child.stderr[-3000:]}")
    return json.loads(child.stdout.strip().splitlines()[-1])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=5, help="timed train + predict pairs after the warm-up")
    parser.add_argument("--child", choices=("plain", "keras_vit"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(measure(args.child, args.steps)))
        return
    print("| round | kind | load | warm-up s | recompiles | frames | later recompiles | train + predict ms |")
    print("|---|---|---|---|---|---|---|---|")
    for index in range(args.rounds):
        for kind in ("plain", "keras_vit"):
            load = os.getloadavg()[0]
            r = run(kind, args.steps)
            print(f"| {index + 1} | {kind} | {load:.1f} | {r['warm_up_s']:.1f} | {r['recompiles']} | {r['frames']} | "
                  f"{r['later_recompiles']} | {r['train_plus_predict_ms']:.0f} |", flush=True)


if __name__ == "__main__":
    main()
