"""Padding share of NaFlex batches on a mixed-aspect data set, one image per sequence against
packed (`keras_vit.packing.first_fit`).

    python benchmarks/naflex_packing.py                       # 10,000 images, budget 256, patch 16
    python benchmarks/naflex_packing.py --images 2000 --seq-len 576

The data set: images of random sizes, each side log-uniform in [--min-side, --max-side]
pixels (aspect ratios from about 1:10 to 10:1), drawn with --seed. Two ways to size them:
"budget" resizes every image, its aspect ratio kept, to fill the budget
(`keras_vit.naflex.budget_size`, SigLIP 2 / timm NaFlex); "native" keeps an image's own size
(its sides rounded up to whole patches) unless it exceeds the budget, then as "budget"
(NaViT-style). Padding share: padded tokens / all tokens of the sequences.
"""

import argparse
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from keras_vit.naflex import budget_size  # noqa: E402
from keras_vit.packing import first_fit  # noqa: E402


def patch_counts(sizes, patch, seq_len, mode):
    counts = []
    for height, width in sizes:
        native = math.ceil(height / patch) * math.ceil(width / patch)
        if mode == "native" and native <= seq_len:
            counts.append(native)
        else:
            h, w = budget_size(height, width, patch, seq_len)
            counts.append((h // patch) * (w // patch))
    return counts


def padding_shares(counts, seq_len):
    """`(one image per sequence, packed, sequences packed)`."""
    tokens = sum(counts)
    rows = len(first_fit(counts, seq_len))
    return 1 - tokens / (len(counts) * seq_len), 1 - tokens / (rows * seq_len), rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=10_000)
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--patch", type=int, default=16)
    parser.add_argument("--min-side", type=int, default=32)
    parser.add_argument("--max-side", type=int, default=512)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    sides = np.exp(rng.uniform(np.log(args.min_side), np.log(args.max_side), (args.images, 2))).astype(int)
    print(f"{args.images} images, sides log-uniform in [{args.min_side}, {args.max_side}] px (seed {args.seed}), "
          f"patch {args.patch}, budget {args.seq_len} patches")
    print("sizing   padding: one image/sequence   packed   sequences: unpacked -> packed")
    for mode in ("budget", "native"):
        counts = patch_counts(sides.tolist(), args.patch, args.seq_len, mode)
        before, after, rows = padding_shares(counts, args.seq_len)
        print(f"{mode:8s} {before:28.1%} {after:8.1%}   {args.images:10d} -> {rows}")


if __name__ == "__main__":
    main()
