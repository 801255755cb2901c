"""The `tf.data` pipelines of a NaFlex model (`naflex=True`, SigLIP 2): each image keeps its
aspect ratio and becomes the `{"patches", "spatial_shapes", "mask"}` input of
`keras_vit.naflex_inputs`, on the host.

Training follows timm's NaFlex loader (`timm/data/naflex_dataset.py`): every batch draws its
patch budget (sequence length) from `seq_lens`, and its batch size is `tokens // seq_len`
(at least 1), `tokens = batch_size * max(seq_lens)`, so the tokens per batch stay about
constant. The draw is a pure function of `(seed, batch index)` (`batch_plan`), so the stream
can start at any batch (`start_batch`) as a resumed run needs. Per example: a random crop
(`augment.crop_window`) and flip as the square pipeline draws them, then the aspect-kept
resize of `keras_vit.data.naflex_inputs.budget_size`, scaling, patches in row-major order, padding.

Evaluation: each whole image under the largest budget, in batches of `batch_size`.

Packed (`packed`, the `naflex_pack` training option): each batch's images placed by first fit
into sequences of the batch's budget (`keras_vit.data.packing.pack`; never more sequences than
images), for `packing.packed_model`;
the labels become `(rows, images)` with a weight of 1 per image and 0 per empty place, so the
weighted mean loss and metrics are the unpacked batch's. A map of each batch: the stream
resumes as the unpacked one.
"""

import numpy as np
import tensorflow as tf

from keras_vit.data import augment, pipeline
from keras_vit.data.pipeline import AUTOTUNE, as_labels, dataset_options
from keras_vit.data.naflex_inputs import budget_size, check_seq_lens
from keras_vit.data.packing import pack
from keras_vit.preprocessing import preprocessing as preprocessing_of

SEQ_LENS = (128, 256, 576, 784, 1024)  # timm's `train_seq_lens`
# MINSTD (Park-Miller): the per-batch draw, in integers both NumPy and TensorFlow compute alike
_MODULUS, _MULTIPLIER = 2_147_483_647, 48_271


def batch_plan(batch_index, seq_lens, batch_size, seed):
    """`(seq_len, examples)` of batch `batch_index` (int64 tensors, any shape): the budget drawn
    from `seq_lens` by `(seed, batch_index)` and the batch size keeping `batch_size *
    max(seq_lens)` tokens."""
    state = (tf.cast(batch_index, tf.int64) * 7_919 + seed * 104_729 + 1) % _MODULUS + 1
    for _ in range(3):
        state = state * _MULTIPLIER % _MODULUS
    lens = tf.constant(seq_lens, tf.int64)
    seq_len = tf.gather(lens, state * len(seq_lens) // _MODULUS)
    return seq_len, tf.maximum(batch_size * max(seq_lens) // seq_len, 1)


def examples_before(batch_index, seq_lens, batch_size, seed):
    """The examples the batches before `batch_index` hold."""
    if batch_index <= 0:
        return 0
    _, sizes = batch_plan(tf.range(batch_index, dtype=tf.int64), seq_lens, batch_size, seed)
    return int(tf.reduce_sum(sizes))


def _budget(shape, patch_size, seq_len):
    """`(2,)` int32 pixel size of `budget_size` (NumPy on the host, the same bisection)."""

    def size(height, width, budget):
        return np.array(budget_size(int(height), int(width), patch_size, int(budget)), np.int32)

    result = tf.numpy_function(size, [shape[0], shape[1], seq_len], tf.int32, stateful=False)
    return tf.ensure_shape(result, [2])


def naflex_example(image, patch_size, seq_len, scaling):
    """`(patches (seq_len, p*p*3), spatial_shapes (2,), mask (seq_len,))` of one float32 or
    uint8 `(height, width, 3)` image in [0, 255], as `keras_vit.naflex_inputs` makes it."""
    image = tf.cast(image, tf.float32)
    shape = tf.shape(image, out_type=tf.int32)[:2]
    size = _budget(shape, patch_size, seq_len)
    pixels = tf.cond(tf.reduce_all(tf.equal(size, shape)), lambda: image,
                     lambda: augment.resize(image, size))
    pixels = (pixels - np.float32(scaling.offset)) / np.float32(scaling.scale)
    rows, cols = size[0] // patch_size, size[1] // patch_size
    grid = tf.reshape(pixels, [rows, patch_size, cols, patch_size, 3])
    patches = tf.reshape(tf.transpose(grid, [0, 2, 1, 3, 4]), [rows * cols, patch_size * patch_size * 3])
    padding = tf.cast(seq_len, tf.int32) - rows * cols
    patches = tf.pad(patches, [[0, padding], [0, 0]])
    mask = tf.pad(tf.ones([rows * cols], tf.int32), [[0, padding]])
    return patches, tf.stack([rows, cols]), mask


def _inputs(patches, shapes, mask):
    return {"patches": patches, "spatial_shapes": shapes, "mask": mask}


def train_dataset(source, augmentation, batch_size, patch_size, *, seq_lens=SEQ_LENS, preprocessing="vit",
                  one_hot=False, seed=0, start_batch=0, shuffle_buffer=10_000, shard=(1, 0), deterministic=False,
                  on_corrupt="skip"):
    """An endless stream of `(naflex inputs, labels)` batches of varying size and budget (see
    the module docstring); `augmentation` gives the crop area / aspect and the flip
    (`image_size`, RandAugment and MixUp / CutMix are not used)."""
    if batch_size < 1:
        raise ValueError(f"batch_size={batch_size} must be >= 1.")
    seq_lens = check_seq_lens(seq_lens)
    scaling = preprocessing_of(preprocessing)
    num_shards, index = shard
    data = source.train if num_shards == 1 else source.train.shard(num_shards, index)
    size = pipeline.shard_size(source.train_size, num_shards, index)
    if size == 0:
        raise ValueError(f"The training split of {source.name!r} is empty (for shard {index}/{num_shards}).")
    buffer = max(1, min(shuffle_buffer, size))

    def one_pass(epoch):
        tf.compat.v1.get_default_graph().seed = None  # as `pipeline.train_dataset`
        return data.shuffle(buffer, seed=epoch * 1_000_003 + seed, reshuffle_each_iteration=False)

    start = examples_before(start_batch, seq_lens, batch_size, seed)
    first_epoch, offset = divmod(start, size)
    stream = tf.data.Dataset.range(first_epoch, 2**62).flat_map(one_pass).skip(offset).enumerate(start=start)

    def assign(state, element):  # (batch index, examples of it so far) -> the batch of each example
        batch, filled = state
        _, examples = batch_plan(batch, seq_lens, batch_size, seed)
        full = filled + 1 >= examples
        following = (tf.where(full, batch + 1, batch), tf.where(full, tf.constant(0, tf.int64), filled + 1))
        return following, (batch, element)

    initial = (tf.constant(start_batch, tf.int64), tf.constant(0, tf.int64))
    stream = stream.scan(initial, assign)
    aug = augmentation

    def example(batch, element):
        position, element = element
        key = tf.stack([tf.cast(seed, tf.int64), position])
        crop_key, flip_key = tf.unstack(tf.random.experimental.stateless_split(key, 2))
        if source.read:
            data, label = source.read(*element)
            image = augment.decode_crop(data, crop_key, aug.crop_area, aug.crop_aspect)
        else:
            image, label = source.decode(*element) if source.decode else element
            image = augment.to_rgb(image)
            begin, crop = augment.crop_window(tf.shape(image), crop_key, aug.crop_area, aug.crop_aspect)
            image = tf.slice(image, begin, crop)
        if aug.flip:
            image = tf.image.stateless_random_flip_left_right(image, flip_key)
        seq_len, _ = batch_plan(batch, seq_lens, batch_size, seed)
        return batch, naflex_example(image, patch_size, seq_len, scaling), label

    stream = stream.map(example, num_parallel_calls=AUTOTUNE, deterministic=True)
    if (source.decode or source.read) is not None and on_corrupt == "skip":
        stream = stream.ignore_errors()
    num_classes = source.num_classes

    def collate(batch, window):
        _, examples = batch_plan(batch, seq_lens, batch_size, seed)
        return window.batch(examples)

    stream = stream.group_by_window(lambda batch, *_: batch, collate,
                                    window_size_func=lambda batch: batch_plan(batch, seq_lens, batch_size, seed)[1])

    def finish(batch, inputs, labels):
        return _inputs(*inputs), as_labels(labels, num_classes, one_hot)

    stream = stream.map(finish, num_parallel_calls=AUTOTUNE)
    return stream.prefetch(AUTOTUNE).with_options(dataset_options(deterministic))


def eval_dataset(source, batch_size, patch_size, seq_len, *, preprocessing="vit", one_hot=False,
                 split="validation", on_corrupt="skip"):
    """`(naflex inputs, labels)` batches of a split in order, each whole image under `seq_len`."""
    data = source.validation if split == "validation" else source.train
    if data is None:
        raise ValueError(f"{source.name!r} has no {split} split.")
    scaling, num_classes = preprocessing_of(preprocessing), source.num_classes

    def example(*element):
        image, label = source.decode(*element) if source.decode else element
        return naflex_example(augment.to_rgb(image), patch_size, seq_len, scaling), label

    ds = data.map(example, num_parallel_calls=AUTOTUNE)
    if source.decode is not None and on_corrupt == "skip":
        ds = ds.ignore_errors()
    ds = ds.batch(batch_size).map(lambda inputs, labels: (_inputs(*inputs), as_labels(labels, num_classes, one_hot)))
    return ds.prefetch(AUTOTUNE).with_options(dataset_options(True))


def packed(dataset):
    """`dataset`'s `(naflex inputs, labels)` batches packed into rows of their own length:
    `(packed inputs, labels (rows, images[, classes]), weights (rows, images))` (module docstring)."""

    def pack_batch(patches, shapes, mask, labels):
        inputs, index = pack({"patches": patches, "spatial_shapes": shapes, "mask": mask})
        used = index >= 0
        placed = labels[np.maximum(index, 0)]
        placed[~used] = 0
        return inputs["patches"], inputs["spatial_shapes"], inputs["segment_ids"], placed, used.astype(np.float32)

    def finish(inputs, labels):
        label_spec = dataset.element_spec[1]
        values = tf.numpy_function(
            pack_batch, [inputs["patches"], inputs["spatial_shapes"], inputs["mask"], labels],
            [tf.float32, tf.int32, tf.int32, label_spec.dtype, tf.float32], stateful=False)
        shapes = ([None, None, inputs["patches"].shape[-1]], [None, None, 2], [None, None],
                  [None, None, *label_spec.shape[1:]], [None, None])
        patches, spatial_shapes, segment_ids, labels, weights = (
            tf.ensure_shape(value, shape) for value, shape in zip(values, shapes))
        return {"patches": patches, "spatial_shapes": spatial_shapes, "segment_ids": segment_ids}, labels, weights

    return dataset.map(finish, num_parallel_calls=AUTOTUNE)
