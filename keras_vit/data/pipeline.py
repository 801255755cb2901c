"""The `tf.data` input pipelines that feed `model.fit` on every Keras backend.

Training stream: shuffle (a new order every pass over the data) -> repeat forever -> per
example decode (of a JPEG only the crop window), inception crop, flip, [RandAugment] -> batch
(dropping no data: batches run across epoch boundaries) -> prefetch. Then either the host
scales the batch (to [-1, 1], or by the model's mean / std: `preprocessing`), or (`on_step`)
it sends uint8 images and the batch's MixUp / CutMix draw (`augment.mix_table`) to the
training step, which scales and mixes them on the accelerator (`on_step`). Each example's
crop, flip and RandAugment ops, and each batch's MixUp / CutMix, are drawn from a seed keyed by
(first) example position in the stream, so the stream is a pure function of `seed` and can be
started at any example (`start`), which is how a resumed run continues exactly where it stopped.

Evaluation: decode -> resize + centre crop -> scale -> batch -> prefetch.
"""

import dataclasses

import tensorflow as tf

from keras_vit.data import augment
from keras_vit.data import randaugment
from keras_vit.data import three_augment
from keras_vit.preprocessing import preprocessing as preprocessing_of

AUTOTUNE = tf.data.AUTOTUNE


@dataclasses.dataclass
class Augmentation:
    """What the training pipeline does to each example and batch."""

    image_size: int
    crop_area: tuple = (0.05, 1.0)
    crop_aspect: tuple = (3 / 4, 4 / 3)
    flip: bool = True
    randaugment_ops: int = 0
    randaugment_factor: float = 0.5
    mixup: float = 0.0
    cutmix: float = 0.0
    crop: str = "inception"  # or "simple" (DeiT III's `augment.simple_crop`; crop_area / crop_aspect unused)
    three_augment: bool = False  # DeiT III's one-of-three (`three_augment.three_augment`)
    color_jitter: float = 0.0  # brightness / contrast / saturation strength (0: off)
    random_erasing: float = 0.0  # probability of one erased box per image (0: off)
    repeated_augment: int = 1  # each drawn example this many times in a row, differently augmented

    def __post_init__(self):
        low, high = self.crop_area
        if not 0 < low <= high <= 1:
            raise ValueError(f"crop_area={self.crop_area} must satisfy 0 < min <= max <= 1.")
        if not 0 < self.crop_aspect[0] <= self.crop_aspect[1]:
            raise ValueError(f"crop_aspect={self.crop_aspect} must satisfy 0 < min <= max.")
        if self.mixup < 0 or self.cutmix < 0:
            raise ValueError(f"mixup={self.mixup} and cutmix={self.cutmix} must be >= 0 (0 = off).")

    @property
    def mixes_labels(self):
        return self.mixup > 0 or self.cutmix > 0


def dataset_options(deterministic):
    """The `tf.data.Options` of keras_vit's pipelines (parallel maps; order kept if `deterministic`)."""
    options = tf.data.Options()
    options.deterministic = bool(deterministic)
    options.experimental_optimization.map_parallelization = True
    return options


def as_labels(labels, num_classes, one_hot):
    """Class indices as int32, or as float32 one-hot vectors."""
    labels = tf.cast(labels, tf.int32)
    return tf.one_hot(labels, num_classes, dtype=tf.float32) if one_hot else labels


def shard_size(size, num_shards, index):
    """Examples in shard `index` of `num_shards` of `tf.data.Dataset.shard` over `size`."""
    return max(0, -(-(size - index) // num_shards))


def positioned_stream(name, data, data_size, batch_size, *, seed=0, start=0, shuffle_buffer=10_000, shard=(1, 0),
                      part=(1, 0), repeats=1):
    """The endless training stream of `(position, element)` of the `data_size` examples `data`:
    shuffled anew each pass (an order that depends on `seed` and the pass only), each example
    numbered by its position in the stream, starting at example `start`; `shard` and `part` as
    in `train_dataset`. `repeats` > 1: repeated augmentation (Hoffer et al., 2020; DeiT's
    `RASampler`): a pass keeps its length, drawing a 1/repeats share of the examples, each
    `repeats` times in a row (each copy at its own position, so augmented its own way)."""
    num_shards, index = shard
    data = data if num_shards == 1 else data.shard(num_shards, index)
    size = shard_size(data_size, num_shards, index)
    if size == 0:
        raise ValueError(f"The training split of {name!r} is empty (for shard {index}/{num_shards}).")
    buffer = max(1, min(shuffle_buffer, size))

    def one_pass(epoch):
        # The order of each pass depends on (seed, epoch) only: the traced function's graph
        # must not mix in TensorFlow's global seed (with a global seed of 0, TF cannot even
        # take a tensor seed here).
        tf.compat.v1.get_default_graph().seed = None
        shuffled = data.shuffle(buffer, seed=epoch * 1_000_003 + seed, reshuffle_each_iteration=False)
        if repeats == 1:
            return shuffled
        copies = shuffled.take(-(-size // repeats)).flat_map(
            lambda *e: tf.data.Dataset.from_tensors(e if len(e) > 1 else e[0]).repeat(repeats))
        return copies.take(size)

    parts, part_index = part
    start *= parts  # examples of the global stream
    first_epoch, offset = divmod(start, size)
    stream = tf.data.Dataset.range(first_epoch, 2**62).flat_map(one_pass).skip(offset)
    stream = stream.enumerate(start=start)
    if parts > 1:
        stream = stream.filter(lambda position, _: (position // batch_size) % parts == part_index)
    return stream


def train_dataset(
    source,
    augmentation,
    batch_size,
    *,
    one_hot=False,
    seed=0,
    start=0,
    shuffle_buffer=10_000,
    shard=(1, 0),
    part=(1, 0),
    deterministic=False,
    on_corrupt="skip",
    on_step=False,
    preprocessing="vit",
):
    """An endless stream of `(images, labels)` batches of `batch_size` for training.

    With `on_step` the images are uint8 in [0, 255] and, with MixUp / CutMix, `(images, mix
    table)`, for a training step that finishes them (`on_step.TrainingModel`); without it
    they are float32, scaled by `preprocessing` (a model: its own; default [-1, 1]), and the
    augmentation must not mix.

    `start` is the number of examples this process has already consumed. Two ways to split
    the work over processes: `shard=(num_shards, index)` gives each its own shard of the data;
    `part=(parts, index)` keeps the one-process stream of global batches of `batch_size *
    parts` examples and gives this process part `index` of each (the examples of the other
    parts are skipped before they are decoded or augmented).
    """
    if batch_size < 1:
        raise ValueError(f"batch_size={batch_size} must be >= 1.")
    if augmentation.mixes_labels and not on_step:
        raise ValueError("MixUp / CutMix run in the training step of the classification task; "
                         "this task's stream cannot mix (set mixup=0 and cutmix=0).")
    stream = positioned_stream(source.name, source.train, source.train_size, batch_size, seed=seed, start=start,
                               shuffle_buffer=shuffle_buffer, shard=shard, part=part,
                               repeats=augmentation.repeated_augment)
    aug = augmentation

    def example(position, element):
        key = tf.stack([tf.cast(seed, tf.int64), position])
        crop = (key, aug.image_size, aug.crop_area, aug.crop_aspect, aug.flip)
        simple = (key, aug.image_size, aug.flip)
        if source.read:
            data, label = source.read(*element)
            image = (augment.train_transform_encoded(data, *crop) if aug.crop == "inception"
                     else augment.simple_transform(augment.decode(data), *simple))
        else:
            image, label = source.decode(*element) if source.decode else element
            image = augment.train_transform(image, *crop) if aug.crop == "inception" else \
                augment.simple_transform(image, *simple)
        if aug.randaugment_ops:
            ra_key = tf.random.experimental.stateless_fold_in(key, 1)
            image = randaugment.rand_augment(image, ra_key, aug.randaugment_ops, aug.randaugment_factor)
        if aug.three_augment:
            image = three_augment.three_augment(image, tf.random.experimental.stateless_fold_in(key, 3))
        if aug.color_jitter:
            image = three_augment.color_jitter(image, tf.random.experimental.stateless_fold_in(key, 4), aug.color_jitter)
        if aug.random_erasing:
            image = augment.random_erase(image, tf.random.experimental.stateless_fold_in(key, 5), aug.random_erasing)
        if on_step:  # pixels stay in [0, 255] through every transform
            image = tf.saturate_cast(tf.round(image), tf.uint8)
        return image, label, position

    stream = stream.map(example, num_parallel_calls=AUTOTUNE, deterministic=deterministic)
    if (source.decode or source.read) is not None and on_corrupt == "skip":
        stream = stream.ignore_errors()
    stream = stream.batch(batch_size, drop_remainder=True)
    num_classes, size, scaling = source.num_classes, aug.image_size, preprocessing_of(preprocessing)

    def finish(images, labels, positions):
        labels = as_labels(labels, num_classes, one_hot or aug.mixes_labels)
        if not on_step:
            return augment.normalise(images, scaling), labels
        # keyed by the batch's first example: reproducible and resumable like the examples
        key = tf.random.experimental.stateless_fold_in(tf.stack([tf.cast(seed, tf.int64), positions[0]]), 2)
        table = augment.mix_table(key, batch_size, size, size, aug.mixup, aug.cutmix)
        return (images if table is None else (images, table)), labels

    stream = stream.map(finish, num_parallel_calls=AUTOTUNE)
    return stream.prefetch(AUTOTUNE).with_options(dataset_options(deterministic))


def eval_dataset(
    source,
    image_size,
    batch_size,
    *,
    one_hot=False,
    crop_fraction=1.0,
    split="validation",
    pad_to_multiple=1,
    part=(1, 0),
    on_corrupt="skip",
    preprocessing="vit",
):
    """`(images, labels)` batches of a split in order, resized + centre-cropped, scaled by
    `preprocessing` (a model: its own; default [-1, 1]).

    With `pad_to_multiple > 1` or `part` (as in `train_dataset`) every batch has exactly
    `batch_size` examples (a static shape, as data parallelism over devices and processes
    needs): the split is padded up to whole global batches of `batch_size * parts`, and the
    batches become `(images, labels, sample_weight)` with weight 0 on the padding, which
    weighted metrics and the loss then do not count.
    """
    data = source.validation if split == "validation" else source.train
    if data is None:
        raise ValueError(f"{source.name!r} has no {split} split.")
    if not 0 < crop_fraction <= 1:
        raise ValueError(f"crop_fraction={crop_fraction} must be in (0, 1].")
    num_classes, scaling = source.num_classes, preprocessing_of(preprocessing)

    def example(*element):
        image, label = source.decode(*element) if source.decode else element
        return augment.eval_transform(image, image_size, crop_fraction), label

    parts, part_index = part
    if parts > 1:
        data = data.enumerate().filter(lambda position, _: (position // batch_size) % parts == part_index)
        data = data.map(lambda position, element: element)
    ds = data.map(example, num_parallel_calls=AUTOTUNE)
    if source.decode is not None and on_corrupt == "skip":
        ds = ds.ignore_errors()
    if parts > 1 or pad_to_multiple > 1:  # every process the same number of full batches
        size = source.validation_size if split == "validation" else source.train_size
        batches = -(-size // (batch_size * parts))
        ds = ds.map(lambda image, label: (image, label, tf.constant(1.0)))
        padding = tf.data.Dataset.from_tensors(tuple(tf.zeros(s.shape, s.dtype) for s in ds.element_spec))
        ds = ds.concatenate(padding.repeat()).take(batches * batch_size).batch(batch_size, drop_remainder=True)
    else:
        ds = ds.batch(batch_size)

    def finish(images, labels, *weights):
        return (augment.normalise(images, scaling), as_labels(labels, num_classes, one_hot), *weights)

    ds = ds.map(finish, num_parallel_calls=AUTOTUNE)
    return ds.prefetch(AUTOTUNE).with_options(dataset_options(True))
