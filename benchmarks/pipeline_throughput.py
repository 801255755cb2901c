"""Images/s per CPU core of the `finetune` and `scratch` training pipelines (tf.data).

    python benchmarks/pipeline_throughput.py                      # 1 and 2 cores, 224 and 384 px
    python benchmarks/pipeline_throughput.py --cores 1 --images 64 --batches 2   # a quick check

The input is JPEG-encoded images made here (ImageNet's mean size, 500 x 375, smooth random
content plus noise, quality 90), decoded in the pipeline as the image-folder and
tensorflow-datasets sources are. Each (recipe, resolution, cores) runs in its own process
pinned to that many cores, with tf.data's thread pool of that size, through
`keras_vit.training.pipeline.train_dataset` with the recipe's augmentation (finetune:
inception crop + flip + resize; scratch: the same, RandAugment 2 x 0.5, MixUp 0.8 / CutMix 1.0).
Prints images/s, images/s per core, and the cores needed for `--target` images/s.
"""

import argparse
import json
import math
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def jpeg_source(count, seed=0):
    """A `Source` of `count` JPEG byte strings (500 x 375) with 1000 classes."""
    import numpy as np
    import tensorflow as tf

    from keras_vit.training.data import Source

    rng = np.random.default_rng(seed)
    encoded = []
    for _ in range(count):
        coarse = rng.uniform(0, 255, (12, 16, 3)).astype("float32")
        smooth = tf.image.resize(coarse[None], (375, 500))[0].numpy()
        image = np.clip(smooth + rng.normal(0, 12, smooth.shape), 0, 255).astype("uint8")
        encoded.append(tf.io.encode_jpeg(image, quality=90).numpy())
    labels = rng.integers(0, 1000, count).astype("int64")
    train = tf.data.Dataset.from_tensor_slices((encoded, labels)).cache()

    def decode(data, label):
        return tf.io.decode_jpeg(data, channels=3), label

    return Source("jpeg", train, None, count, 0, [str(i) for i in range(1000)], decode=decode)


def measure(cfg):
    """Child process: images/s of one pipeline on `cfg["cores"]` cores."""
    os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[: cfg["cores"]])
    import tensorflow as tf

    tf.config.threading.set_inter_op_parallelism_threads(cfg["cores"])
    tf.config.threading.set_intra_op_parallelism_threads(cfg["cores"])
    from keras_vit.training import pipeline, recipes
    from keras_vit.training.engine import make_augmentation

    config = recipes.recipe(cfg["recipe"], image_size=cfg["resolution"])
    stream = pipeline.train_dataset(jpeg_source(cfg["images"]), make_augmentation(config), cfg["batch"], seed=0)
    options = tf.data.Options()
    options.threading.private_threadpool_size = cfg["cores"]
    batches = iter(stream.with_options(options))
    next(batches)  # warm-up: tracing, the first fill of the prefetch buffers
    start = time.perf_counter()
    for _ in range(cfg["batches"]):
        images, _labels = next(batches)
    seconds = time.perf_counter() - start
    assert tuple(images.shape) == (cfg["batch"], cfg["resolution"], cfg["resolution"], 3)
    print(json.dumps({"images_per_s": cfg["batches"] * cfg["batch"] / seconds}))


def run(cfg):
    child = subprocess.run([sys.executable, __file__, "--child", json.dumps(cfg)], capture_output=True, text=True)
    if child.returncode:
        raise SystemExit(f"pipeline {cfg} failed:\n{child.stderr[-3000:]}")
    return json.loads(child.stdout.strip().splitlines()[-1])["images_per_s"]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipes", nargs="+", default=["finetune", "scratch"], choices=("finetune", "scratch"))
    parser.add_argument("--resolutions", nargs="+", type=int, default=[224, 384])
    parser.add_argument("--cores", nargs="+", type=int, default=[1, 2])
    parser.add_argument("--images", type=int, default=512, help="distinct JPEG images made (cached encoded)")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--batches", type=int, default=8, help="timed batches")
    parser.add_argument("--target", type=float, default=3300, help="images/s to feed (one H100, ViT-B/16 training)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return measure(json.loads(args.child))
    available = len(os.sched_getaffinity(0))
    if max(args.cores) > available:
        parser.error(f"--cores {max(args.cores)} > the {available} cores this process may use")
    print(f"JPEG 500x375 -> batch {args.batch}; load average {os.getloadavg()[0]:.1f} on {available} cores\n")
    print(f"| recipe | px | cores | img/s | img/s per core | cores for {args.target:g} img/s |\n|---|---|---|---|---|---|")
    for recipe in args.recipes:
        for resolution in args.resolutions:
            for cores in args.cores:
                cfg = dict(recipe=recipe, resolution=resolution, cores=cores, images=args.images,
                           batch=args.batch, batches=args.batches)
                rate = run(cfg)
                per_core = rate / cores
                print(f"| {recipe} | {resolution} | {cores} | {rate:.0f} | {per_core:.0f} | "
                      f"{math.ceil(args.target / per_core)} |", flush=True)


if __name__ == "__main__":
    main()
