"""Images/s per CPU core of the `finetune` and `scratch` training pipelines (tf.data).

    python benchmarks/pipeline_throughput.py                      # 1 and 2 cores, 224 and 384 px
    python benchmarks/pipeline_throughput.py --cores 1 --images 64 --batches 2   # a quick check

The input is JPEG-encoded images made here (ImageNet's mean size, 500 x 375, smooth random
content plus noise, quality 90), decoded in the pipeline as the image-folder and
tensorflow-datasets sources are. Each (recipe, resolution, cores) runs in its own process
pinned to that many cores, with tf.data's thread pool of that size, through
`keras_vit.data.pipeline.train_dataset` with the recipe's augmentation as training runs
it (finetune: inception crop + flip + resize; scratch: the same and RandAugment 2 x 0.5, with
the batch's MixUp 0.8 / CutMix 1.0 drawn; uint8 batches, scaled and mixed in the training step).
Two references run in the same way (same files, cores and thread pool size): the decode limit
(`tf.io.decode_jpeg` of each file, nothing else) and a plain per-image pipeline of the kind
timm's default loader runs (Pillow + NumPy on `cores` threads). Prints images/s per core, its
ratio to both references measured in the same run, and the cores needed for `--target` images/s.
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

    from keras_vit.data.sources import Source

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

    return Source("jpeg", train, None, count, 0, [str(i) for i in range(1000)], decode=decode, read=lambda *e: e)


def decode_limit(source, batch):
    """The decode limit: `tf.io.decode_jpeg` of each file, nothing else, batched."""
    import tensorflow as tf

    images = source.train.repeat().map(lambda data, label: (tf.io.decode_jpeg(data, channels=3), label), tf.data.AUTOTUNE)
    return images.batch(batch).prefetch(tf.data.AUTOTUNE)


def plain_per_image(source, batch, cores, resolution, seed=0):
    """A plain per-image pipeline like timm's default loader on `cores` threads: Pillow decode,
    random-resized crop (area 0.08-1, aspect 3/4-4/3), flip, bilinear resize; NumPy
    float32 CHW, normalised; stacked."""
    import io
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np
    from PIL import Image

    encoded = [data.numpy() for data, _ in source.train]
    mean, std = np.float32(0.5 * 255), np.float32(0.5 * 255)

    def one(index):
        rng = np.random.default_rng((seed, index))
        image = Image.open(io.BytesIO(encoded[index % len(encoded)])).convert("RGB")
        width, height = image.size
        box = (0, 0, width, height)
        for _ in range(10):  # torchvision's RandomResizedCrop.get_params
            area = width * height * rng.uniform(0.08, 1.0)
            aspect = math.exp(rng.uniform(math.log(3 / 4), math.log(4 / 3)))
            w, h = round(math.sqrt(area * aspect)), round(math.sqrt(area / aspect))
            if 0 < w <= width and 0 < h <= height:
                left, top = rng.integers(0, width - w + 1), rng.integers(0, height - h + 1)
                box = (left, top, left + w, top + h)
                break
        image = image.resize((resolution, resolution), Image.BILINEAR, box=box)
        if rng.uniform() < 0.5:
            image = image.transpose(Image.FLIP_LEFT_RIGHT)
        return ((np.asarray(image, np.float32) - mean) / std).transpose(2, 0, 1)

    pool = ThreadPoolExecutor(cores)

    def batches():
        for start in range(0, 2**62, batch):
            yield np.stack(list(pool.map(one, range(start, start + batch)))), None

    return batches(), (batch, 3, resolution, resolution)


def pin(cores):
    """This process, and TensorFlow's thread pools, on its first `cores` cores."""
    os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:cores])
    import tensorflow as tf

    tf.config.threading.set_inter_op_parallelism_threads(cores)
    tf.config.threading.set_intra_op_parallelism_threads(cores)


def measure(cfg):
    """Child process: images/s of one pipeline (`cfg["recipe"]`, or the references "decode"
    and "plain") on `cfg["cores"]` cores."""
    pin(cfg["cores"])
    import tensorflow as tf

    from keras_vit.training import recipes
    from keras_vit.data import pipeline
    from keras_vit.training.engine import make_augmentation

    source, size = jpeg_source(cfg["images"]), cfg["resolution"]
    shape = (cfg["batch"], size, size, 3)
    options = tf.data.Options()
    options.threading.private_threadpool_size = cfg["cores"]
    if cfg["recipe"] == "plain":
        batches, shape = plain_per_image(source, cfg["batch"], cfg["cores"], size)
    elif cfg["recipe"] == "decode":
        batches, shape = iter(decode_limit(source, cfg["batch"]).with_options(options)), (cfg["batch"], 375, 500, 3)
    else:
        config = recipes.recipe(cfg["recipe"], image_size=size)
        stream = pipeline.train_dataset(source, make_augmentation(config), cfg["batch"], seed=0, on_step=True)
        batches = iter(stream.with_options(options))
    next(batches)  # warm-up: tracing, the first fill of the prefetch buffers
    start = time.perf_counter()
    for _ in range(cfg["batches"]):
        images, _labels = next(batches)
    seconds = time.perf_counter() - start
    images = images[0] if isinstance(images, tuple) else images  # (uint8 images, mix table)
    assert tuple(images.shape) == shape, images.shape
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
    parser.add_argument("--rounds", type=int, default=1, help="repeats of the whole set (the references each time)")
    parser.add_argument("--target", type=float, default=3300, help="images/s to feed (one H100, ViT-B/16 training)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return measure(json.loads(args.child))
    available = len(os.sched_getaffinity(0))
    if max(args.cores) > available:
        parser.error(f"--cores {max(args.cores)} > the {available} cores this process may use")
    print(f"JPEG 500x375 -> batch {args.batch}; load average {os.getloadavg()[0]:.1f} on {available} cores\n")
    print(f"| recipe | px | cores | img/s per core | / decode limit | / plain per-image | cores for {args.target:g} img/s "
          "| load |\n|---|---|---|---|---|---|---|---|")
    for cores in args.cores:
        base = dict(cores=cores, images=args.images, batch=args.batch, batches=args.batches)
        for round_ in range(args.rounds):
            decode = run(dict(base, recipe="decode", resolution=0)) / cores
            print(f"| decode limit | - | {cores} | {decode:.0f} | 1.00 | - | {math.ceil(args.target / decode)} | "
                  f"{os.getloadavg()[0]:.1f} |", flush=True)
            for resolution in args.resolutions:
                plain = run(dict(base, recipe="plain", resolution=resolution)) / cores
                print(f"| plain per-image | {resolution} | {cores} | {plain:.0f} | {plain / decode:.2f} | 1.00 | "
                      f"{math.ceil(args.target / plain)} | {os.getloadavg()[0]:.1f} |", flush=True)
                for recipe in args.recipes:
                    rate = run(dict(base, recipe=recipe, resolution=resolution)) / cores
                    print(f"| {recipe} | {resolution} | {cores} | {rate:.0f} | {rate / decode:.2f} | {rate / plain:.2f} | "
                          f"{math.ceil(args.target / rate)} | {os.getloadavg()[0]:.1f} |", flush=True)


if __name__ == "__main__":
    main()
