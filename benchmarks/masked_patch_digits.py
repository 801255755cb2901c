"""Does masked patch prediction help? Pre-train on the digits images, fine-tune with few labels.

For each seed:
  1. pre-train the digits ViT (recipe `masked_patch_digits`) on the training images of
     scikit-learn's digits (1437 images, labels unused) by masked patch prediction;
  2. fine-tune it (recipe `digits`, `weights=` the pre-trained encoder) on `--label-fraction`
     of the training labels (a class-stratified draw with the seed);
  3. fine-tune the same recipe from random initialisation on the same labels, same steps
     (the few labelled examples are repeated `--repeat` times per epoch, so the per-epoch
     validation and checkpoint run every few steps rather than every other one);
and report both arms' top-1 on the 360 held-out digits, with mean and standard deviation over
the seeds. The held-out images are used by neither pre-training nor fine-tuning.

    KERAS_BACKEND=torch python benchmarks/masked_patch_digits.py [--seeds 0 1 2]
        [--pretrain-steps 500] [--finetune-steps 150] [--label-fraction 0.1] [--repeat 4] [--json out.json]
"""

import argparse
import json
import os
import tempfile
import time

import numpy as np


def _arrays(source_split):
    images, labels = [], []
    for image, label in source_split.as_numpy_iterator():
        images.append(image)
        labels.append(label)
    return np.stack(images), np.asarray(labels)


def run(seeds, pretrain_steps, finetune_steps, label_fraction, repeat, workdir):
    import keras

    from keras_vit.training import pretrain, recipe, train
    from keras_vit.data.sources import digits, stratified_split

    source = digits()
    (x_train, y_train), held_out = _arrays(source.train), _arrays(source.validation)
    quiet = dict(tensorboard=False, verbose=0)
    rows = []
    for seed in seeds:
        started = time.time()
        pre = pretrain(
            "masked_patch_digits", data=((x_train, np.zeros_like(y_train)), held_out), seed=seed,
            steps=pretrain_steps, output_dir=os.path.join(workdir, f"pretrain-{seed}"), **quiet,
        )
        _, labelled = stratified_split(y_train, label_fraction, seed)
        few = ((np.tile(x_train[labelled], (repeat, 1, 1, 1)), np.tile(y_train[labelled], repeat)), held_out)
        top1 = {}
        for arm, weights in (("scratch", None), ("pretrained", pre.encoder_path)):
            result = train(
                recipe("digits", seed=seed, steps=finetune_steps, weights=weights,
                       output_dir=os.path.join(workdir, f"{arm}-{seed}"), **quiet),
                data=few,
            )
            top1[arm] = float(result.history["val_accuracy"][-1])
        rows.append(dict(seed=seed, labels=len(labelled), pretrain_accuracy=pre.val_accuracy,
                         scratch=top1["scratch"], pretrained=top1["pretrained"], seconds=time.time() - started))
        print(f"seed {seed}: {len(labelled)} labels, scratch {top1['scratch']:.4f}, pretrained "
              f"{top1['pretrained']:.4f} (masked-colour accuracy {pre.val_accuracy:.4f}, "
              f"{time.time() - started:.0f} s)", flush=True)
    return dict(backend=keras.backend.backend(), pretrain_steps=pretrain_steps, finetune_steps=finetune_steps,
                label_fraction=label_fraction, repeat=repeat, held_out=len(held_out[1]), rows=rows)


def table(report):
    scratch = np.array([r["scratch"] for r in report["rows"]])
    pretrained = np.array([r["pretrained"] for r in report["rows"]])
    gain = pretrained - scratch
    lines = [
        f"digits, {report['backend']}: {report['rows'][0]['labels']} labels "
        f"({report['label_fraction']:.0%} of the training set), {report['finetune_steps']} fine-tuning "
        f"steps, {report['pretrain_steps']} pre-training steps; top-1 on {report['held_out']} held-out digits "
        "(final step)",
        "",
        "| seed | from scratch | pre-trained (masked patches) | gain |",
        "|---|---|---|---|",
    ]
    for row in report["rows"]:
        lines.append(f"| {row['seed']} | {row['scratch']:.4f} | {row['pretrained']:.4f} | "
                     f"{row['pretrained'] - row['scratch']:+.4f} |")
    def spread(values):
        return f"{values.mean():.4f} ± {values.std(ddof=1) if len(values) > 1 else 0.0:.4f}"
    lines.append(f"| mean ± sd | {spread(scratch)} | {spread(pretrained)} | {spread(gain)} |")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--pretrain-steps", type=int, default=500)
    parser.add_argument("--finetune-steps", type=int, default=150)
    parser.add_argument("--label-fraction", type=float, default=0.1)
    parser.add_argument("--repeat", type=int, default=4, help="copies of the labelled examples per epoch")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="masked_patch_digits-") as workdir:
        report = run(args.seeds, args.pretrain_steps, args.finetune_steps, args.label_fraction, args.repeat, workdir)
    print()
    print(table(report))
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(report, handle, indent=1)


if __name__ == "__main__":
    main()
