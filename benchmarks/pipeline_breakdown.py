"""Where one core's time goes per training image: the `finetune` pipeline's steps, one at a time.

    python benchmarks/pipeline_breakdown.py                # 224 and 384 px, 64 JPEGs, 7 rounds

The same JPEGs as `pipeline_throughput.py` (500 x 375, quality 90). Each row is one `tf.function`
applied image by image on one pinned core (no tf.data, no batching): the decode limit (the whole
image decoded), then the training transform built up step by step — the inception-crop window
(the recipe's area and aspect ranges) decoded alone, its antialiased resize (`augment.train_resize`), the flip, the rounding to uint8
— and, as the floor of any host-side resize, the same crop with plain bilinear (no antialiasing).
The rows take turns for `--rounds` rounds; the best round of each gives ms per image and the ratio
to the decode limit (images/s over the decode limit's images/s).
"""

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def steps(size):
    """name -> `(jpeg bytes, (2,) seed) -> tensor`, cumulative."""
    import tensorflow as tf

    from keras_vit.training import recipes
    from keras_vit.data import augment

    config = recipes.recipe("finetune", image_size=size)

    def crop(data, seed):
        return augment.decode_crop(data, seed, config.crop_area, config.crop_aspect)

    def resized(data, seed):
        return augment.train_resize(crop(data, seed), size)

    def flipped(data, seed):
        return tf.image.stateless_random_flip_left_right(resized(data, seed), seed)

    return {
        "decode limit (whole image)": lambda data, seed: tf.io.decode_jpeg(data, channels=3),
        "crop window decoded": crop,
        "+ antialiased resize": resized,
        "+ flip": flipped,
        "+ uint8 (the finetune transform)": lambda data, seed: tf.saturate_cast(tf.round(flipped(data, seed)), tf.uint8),
        "crop window + plain bilinear (floor)": lambda data, seed: tf.image.resize(crop(data, seed), (size, size)),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--resolutions", nargs="+", type=int, default=[224, 384])
    parser.add_argument("--images", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args(argv)
    for flag in ("images", "rounds"):
        if getattr(args, flag) < 1:
            parser.error(f"--{flag} must be >= 1")
    if min(args.resolutions) < 1:
        parser.error("--resolutions must be >= 1")
    from pipeline_throughput import jpeg_source, pin

    pin(1)
    import tensorflow as tf

    data = [encoded for encoded, _ in jpeg_source(args.images).train]
    seeds = [tf.constant([0, i], tf.int64) for i in range(len(data))]
    print(f"one core, {len(data)} JPEGs 500x375, best of {args.rounds} rounds; load {os.getloadavg()[0]:.1f}")
    print("\n| px | step | ms / image | / decode limit |\n|---|---|---|---|")
    for size in args.resolutions:
        functions = {name: tf.function(fn) for name, fn in steps(size).items()}
        for fn in functions.values():
            for encoded, seed in zip(data[:4], seeds[:4]):
                fn(encoded, seed)
        best = dict.fromkeys(functions, float("inf"))
        for _ in range(args.rounds):
            for name, fn in functions.items():
                start = time.perf_counter()
                for encoded, seed in zip(data, seeds):
                    fn(encoded, seed)
                best[name] = min(best[name], time.perf_counter() - start)
        limit = best["decode limit (whole image)"]
        for name, seconds in best.items():
            print(f"| {size} | {name} | {seconds / len(data) * 1e3:.2f} | {limit / seconds:.2f} |")


if __name__ == "__main__":
    main()
