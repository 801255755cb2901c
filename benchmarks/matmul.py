"""GFLOP/s of one ViT-B/16 MLP matmul, (8*197 x 768) @ (768 x 3072), on the current backend.

    KERAS_BACKEND=torch python benchmarks/matmul.py
    KERAS_BACKEND=jax python benchmarks/matmul.py --size 8192   # a GPU's practical bf16 peak

The ceiling that the backend's matmul library sets for any ViT on this machine (a ViT-B/16
step spends ~80 % of its time in such products); TensorFlow is measured with and without XLA.
"""

import argparse
import os
import time

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
from keras import ops  # noqa: E402

M, K, N = 8 * 197, 768, 3072


def _runners(a, w):
    """(label, zero-argument function that computes a @ w and waits for it)."""
    backend = keras.backend.backend()
    if backend == "jax":
        import jax

        product = jax.jit(lambda a, w: a @ w)
        return [("xla", lambda: product(a, w).block_until_ready())]
    if backend == "tensorflow":
        import tensorflow as tf

        runners = []
        for jit in (True, False):
            product = tf.function(lambda a, w: tf.matmul(a, w), jit_compile=jit)
            runners.append(("xla" if jit else "no xla", lambda product=product: product(a, w).numpy()))
        return runners
    import torch

    if a.is_cuda:
        return [("eager", lambda: (a @ w, torch.cuda.synchronize()))]
    return [("eager", lambda: a @ w)]


def gflops(run, shape, repeats=10):
    for _ in range(3):
        run()
    start = time.perf_counter()
    for _ in range(repeats):
        run()
    m, k, n = shape
    return 2 * m * k * n * repeats / (time.perf_counter() - start) / 1e9


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, help="an N x N x N product instead of the ViT-B/16 MLP's")
    args = parser.parse_args()
    shape = (args.size,) * 3 if args.size else (M, K, N)
    rng = np.random.default_rng(0)
    for dtype in ("float32", "bfloat16"):
        a = ops.cast(rng.standard_normal(shape[:2]).astype("float32"), dtype)
        w = ops.cast(rng.standard_normal(shape[1:]).astype("float32"), dtype)
        for label, run in _runners(a, w):
            print(f"{keras.backend.backend()} ({label}) {dtype} {'x'.join(map(str, shape))}: {gflops(run, shape):.0f} GFLOP/s")


if __name__ == "__main__":
    main()
