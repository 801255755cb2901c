"""Padding share of NaFlex batches on a mixed-aspect data set, one image per sequence against
packed (`keras_vit.data.packing.first_fit`).

    python benchmarks/naflex_packing.py                       # 10,000 images, budget 256, patch 16
    python benchmarks/naflex_packing.py --images 2000 --seq-len 576

The data set: images of random sizes, each side log-uniform in [--min-side, --max-side]
pixels (aspect ratios from about 1:10 to 10:1), drawn with --seed. Two ways to size them:
"budget" resizes every image, its aspect ratio kept, to fill the budget
(`keras_vit.data.naflex_inputs.budget_size`, SigLIP 2 / timm NaFlex); "native" keeps an image's own size
(its sides rounded up to whole patches) unless it exceeds the budget, then as "budget"
(NaViT-style). Padding share: padded tokens / all tokens of the sequences.

--train-seq-lens: the training stream of `naflex_seq_lens` (`keras_vit.data.naflex`), unpacked
against `naflex_pack`: each step draws its budget and its images by `batch_plan` (--batch
images at the largest budget), each image sized by "budget"; packed, they fill first-fit
sequences of the step's budget. Per step: images, tokens (sequences x length), padding share.

    python benchmarks/naflex_packing.py --train-seq-lens 64,128,256 --batch 32 --steps 500
"""

import argparse
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from keras_vit.data.naflex_inputs import budget_size  # noqa: E402
from keras_vit.data.packing import first_fit  # noqa: E402


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


def training_stream(sides, patch, seq_lens, batch, steps, seed):
    """`{"unpacked" | "packed": (images, tokens, padding tokens)}` summed over `steps` steps."""
    from keras_vit.data.naflex import batch_plan

    lens, sizes = batch_plan(np.arange(steps), seq_lens, batch, seed)
    totals, start = {"unpacked": [0, 0, 0], "packed": [0, 0, 0]}, 0
    for seq_len, examples in zip(lens.numpy().tolist(), sizes.numpy().tolist()):
        chosen = [sides[(start + i) % len(sides)] for i in range(examples)]
        start += examples
        counts = patch_counts(chosen, patch, seq_len, "budget")
        rows = len(first_fit(counts, seq_len))
        for name, tokens in (("unpacked", examples * seq_len), ("packed", rows * seq_len)):
            totals[name] = [totals[name][0] + examples, totals[name][1] + tokens, totals[name][2] + tokens - sum(counts)]
    return totals


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=10_000)
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--patch", type=int, default=16)
    parser.add_argument("--min-side", type=int, default=32)
    parser.add_argument("--max-side", type=int, default=512)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--train-seq-lens", help="instead: the training stream of these budgets (e.g. 64,128,256)")
    parser.add_argument("--batch", type=int, default=32, help="--train-seq-lens: batch_size")
    parser.add_argument("--steps", type=int, default=500, help="--train-seq-lens: steps drawn")
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    sides = np.exp(rng.uniform(np.log(args.min_side), np.log(args.max_side), (args.images, 2))).astype(int)
    if args.train_seq_lens:
        seq_lens = tuple(sorted(int(n) for n in args.train_seq_lens.split(",")))
        print(f"training stream: naflex_seq_lens {seq_lens}, batch_size {args.batch}, {args.steps} steps, patch "
              f"{args.patch}, images with sides log-uniform in [{args.min_side}, {args.max_side}] px (seed {args.seed})")
        print("stream     images/step   tokens/step   padding   images per 1k tokens")
        for name, (count, tokens, padding) in training_stream(
                sides.tolist(), args.patch, seq_lens, args.batch, args.steps, args.seed).items():
            print(f"{name:10s} {count / args.steps:11.1f} {tokens / args.steps:13.0f} {padding / tokens:9.1%} "
                  f"{1000 * count / tokens:22.2f}")
        return
    print(f"{args.images} images, sides log-uniform in [{args.min_side}, {args.max_side}] px (seed {args.seed}), "
          f"patch {args.patch}, budget {args.seq_len} patches")
    print("sizing   padding: one image/sequence   packed   sequences: unpacked -> packed")
    for mode in ("budget", "native"):
        counts = patch_counts(sides.tolist(), args.patch, args.seq_len, mode)
        before, after, rows = padding_shares(counts, args.seq_len)
        print(f"{mode:8s} {before:28.1%} {after:8.1%}   {args.images:10d} -> {rows}")


if __name__ == "__main__":
    main()
