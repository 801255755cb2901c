"""Images decoded + augmented per host per training step, 1 host vs 2 (`pipeline.train_dataset`'s `part`).

    KERAS_BACKEND=jax python benchmarks/multihost_input.py

Counts the calls of the source's decode function (PNG bytes -> pixels) while each host's stream
yields 10 steps of a global batch of 64, and checks that the 2 hosts' parts make up the
1-host batches.
"""

import io

import numpy as np
import tensorflow as tf
from PIL import Image

from keras_vit.data import pipeline
from keras_vit.data.sources import Source

STEPS, GLOBAL_BATCH = 10, 64


def png_source(count=512):
    rng = np.random.default_rng(0)
    blobs = []
    for _ in range(count):
        buffer = io.BytesIO()
        Image.fromarray(rng.integers(0, 255, (32, 32, 3), dtype=np.uint8)).save(buffer, format="PNG")
        blobs.append(buffer.getvalue())
    counter = tf.Variable(0, dtype=tf.int64)

    def decode(blob, label):
        counter.assign_add(1)
        return tf.io.decode_png(blob, channels=3), label

    data = tf.data.Dataset.from_tensor_slices((blobs, np.arange(count) % 10))
    return Source("png", data, data, count, count, [str(i) for i in range(10)], decode), counter


def run(hosts):
    batches, decoded = [], []
    for host in range(hosts):
        source, counter = png_source()
        stream = pipeline.train_dataset(source, pipeline.Augmentation(32), GLOBAL_BATCH // hosts, seed=1,
                                        part=(hosts, host), deterministic=True)
        batches.append([labels for _, labels in stream.take(STEPS).as_numpy_iterator()])
        decoded.append(int(counter.numpy()))  # includes what prefetching decoded ahead
    return batches, decoded


if __name__ == "__main__":
    one, one_decoded = run(1)
    two, two_decoded = run(2)
    same = all(np.array_equal(np.concatenate([a, b]), whole) for whole, a, b in zip(one[0], *two))
    print(f"1 host: {one_decoded[0] / STEPS:.1f} images decoded per step; 2 hosts: "
          f"{[d / STEPS for d in two_decoded]} per host per step (prefetch included); "
          f"global batches identical: {same}")
