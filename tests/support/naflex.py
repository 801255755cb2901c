"""NaFlex data of the tests: images of mixed sizes, a source of them, a batch of images each
filling its own budget, and a tiny NaFlex training recipe."""

import numpy as np
import tensorflow as tf

import keras_vit
from keras_vit.data.sources import Source
from tests.support import JIT

PATCH = 4
SEQ_LENS = (4, 9, 16)
BATCH = 3  # tokens per batch: 3 * 16

TINY = dict(
    model="custom", patch_size=2, hidden_dim=16, depth=1, num_heads=2, mlp_dim=32, image_size=8, batch_size=8,
    tensorboard=False, jit_compile=JIT, class_token=False, pooling="avg",
    naflex_seq_lens=(4, 9, 16), steps=3, warmup_steps=1, verbose=0, learning_rate=0.01,
)


def mixed_images(count=7, seed=0):
    rng = np.random.default_rng(seed)
    sizes = [(int(rng.integers(3, 40)), int(rng.integers(3, 40))) for _ in range(count)]
    return [rng.integers(0, 256, (*size, 3), dtype=np.uint8) for size in sizes]


def mixed_source(images):
    """A source whose label of each image is its index."""
    data = tf.data.Dataset.from_generator(
        lambda: ((image, i) for i, image in enumerate(images)),
        output_signature=(tf.TensorSpec([None, None, 3], tf.uint8), tf.TensorSpec([], tf.int64)),
    )
    return Source("mixed", data, data, len(images), len(images), [str(i) for i in range(len(images))])


def budget_batch(budgets, seq_len, patch=PATCH):
    """A NaFlex batch of random images at their own aspect ratios, image i filling `budgets[i]`
    patches at most, all padded to `seq_len`."""
    rng = np.random.default_rng(0)
    parts = [keras_vit.naflex_inputs([rng.uniform(0, 255, (int(rng.integers(4, 50)), int(rng.integers(4, 50)), 3))],
                                     max_num_patches=budget, patch_size=patch, preprocessing="vit")
             for budget in budgets]
    batch = {"patches": np.zeros((len(budgets), seq_len, patch * patch * 3), np.float32),
             "spatial_shapes": np.concatenate([p["spatial_shapes"] for p in parts]),
             "mask": np.zeros((len(budgets), seq_len), np.int32)}
    for i, part in enumerate(parts):
        n = part["patches"].shape[1]
        batch["patches"][i, :n], batch["mask"][i, :n] = part["patches"][0], part["mask"][0]
    return batch
