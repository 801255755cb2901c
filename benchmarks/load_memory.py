"""Peak host memory of loading a checkpoint, against the size of its weights.

Writes a random ViT checkpoint in the original npz layout (ViT-H/14 by default: 632M
parameters, 2.5 GB) to a temporary folder, then in a fresh process per measurement records
the peak resident memory (ru_maxrss) of
  1. building the model with random weights (the floor: the model itself), and
  2. building it with `weights=<the npz>`,
each net of the process's memory after imports. Prints the figures; deletes the file.

    KERAS_BACKEND=jax python benchmarks/load_memory.py [--variant ViTH14] [--dir /tmp]
"""

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile

import numpy as np

MEASURE = r"""
import resource, sys, time
import keras_vit
import keras
keras.ops.convert_to_numpy(keras.ops.ones(1))  # backend initialised before the baseline
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
start = time.time()
build = getattr(keras_vit, sys.argv[1])
width = keras_vit.VARIANTS[sys.argv[1]]["hidden_dim"]
model = build(weights=sys.argv[2] if len(sys.argv) > 2 else None, classes=21843, representation_size=width)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(base * 1024, peak * 1024, time.time() - start)
"""


def write_npz(path, variant, classes=21843, seed=0):
    """A random checkpoint with the original key names and shapes, written one array at a time."""
    from keras_vit.variants import VARIANTS

    arch = VARIANTS[variant]
    p, d, h, m = arch["patch_size"], arch["hidden_dim"], arch["num_heads"], arch["mlp_dim"]
    shapes = {
        "embedding/kernel": (p, p, 3, d), "embedding/bias": (d,), "cls": (1, 1, d),
        "Transformer/posembed_input/pos_embedding": (1, 1 + (224 // p) ** 2, d),
        "Transformer/encoder_norm/scale": (d,), "Transformer/encoder_norm/bias": (d,),
        "pre_logits/kernel": (d, d), "pre_logits/bias": (d,), "head/kernel": (d, classes), "head/bias": (classes,),
    }
    for i in range(arch["depth"]):
        block = f"Transformer/encoderblock_{i}/"
        attn = block + "MultiHeadDotProductAttention_1/"
        for name in ("query", "key", "value"):
            shapes[attn + name + "/kernel"], shapes[attn + name + "/bias"] = (d, h, d // h), (h, d // h)
        shapes[attn + "out/kernel"], shapes[attn + "out/bias"] = (h, d // h, d), (d,)
        for ln in ("LayerNorm_0", "LayerNorm_2"):
            shapes[block + ln + "/scale"] = shapes[block + ln + "/bias"] = (d,)
        shapes[block + "MlpBlock_3/Dense_0/kernel"], shapes[block + "MlpBlock_3/Dense_0/bias"] = (d, m), (m,)
        shapes[block + "MlpBlock_3/Dense_1/kernel"], shapes[block + "MlpBlock_3/Dense_1/bias"] = (m, d), (d,)
    rng = np.random.default_rng(seed)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED, allowZip64=True) as zf:
        for key, shape in shapes.items():
            array = rng.standard_normal(shape, dtype=np.float32) * 0.02
            with zf.open(key + ".npy", "w", force_zip64=True) as f:
                np.lib.format.write_array(f, array)
    return sum(int(np.prod(s)) for s in shapes.values()) * 4


def measure(variant, path=None):
    args = [sys.executable, "-c", MEASURE, variant] + ([path] if path else [])
    out = subprocess.run(args, check=True, capture_output=True, text=True, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    base, peak, seconds = out.stdout.split()[-3:]
    return int(base), int(peak), float(seconds)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variant", default="ViTH14")
    parser.add_argument("--dir", default=tempfile.gettempdir(), help="where the temporary checkpoint goes")
    args = parser.parse_args()
    folder = tempfile.mkdtemp(dir=args.dir, prefix="keras_vit_load_memory-")
    try:
        path = os.path.join(folder, f"{args.variant}.npz")
        start = time.time()
        weights = write_npz(path, args.variant)
        size = os.path.getsize(path)
        print(f"{args.variant}: {weights / 1e9:.2f} GB of float32 weights, npz {size / 1e9:.2f} GB "
              f"(written in {time.time() - start:.0f}s)")
        gib = 2**30
        for label, source in (("random init (no weights)", None), ("weights=<npz>", path)):
            base, peak, seconds = measure(args.variant, source)
            net = peak - base
            print(f"  {label:<26} peak RSS {peak / gib:6.2f} GiB, after imports {base / gib:5.2f} GiB, "
                  f"net {net / gib:5.2f} GiB = {net / weights:4.2f}x the weights ({seconds:.0f}s)")
        print(f"  backend {os.environ.get('KERAS_BACKEND', 'tensorflow')}; this process {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GiB")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
