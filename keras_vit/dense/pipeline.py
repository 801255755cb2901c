"""The `tf.data` pipelines of dense training: each image and its target (mask or depth) transformed alike.

Training: the classification stream (`keras_vit.data.pipeline.positioned_stream`: shuffled per pass,
each example keyed by its position, so that a resumed run continues exactly) -> per example one
random crop window (`augment.crop_window`, the inception crop's) cut from image and target, both
resized to the model's size, and one horizontal flip draw applied to both -> batch -> the images
scaled to [-1, 1]. Images are resized bilinearly; targets by nearest neighbour: a mask's class ids
and a depth map's measurements are kept as they are (an interpolated class id means nothing, and
interpolated depth would mix the unmeasured zeros and the two sides of an edge into depths that
were never there). The window lies inside the image, so no pixel is invented (none needs the
ignore label).

Evaluation: the whole image resized to the model's size (bilinear, antialiased), its target
(nearest) with it. Batches padded for data parallelism get targets that count nowhere: masks of
the ignore label, depth 0.
"""

import numpy as np
import tensorflow as tf

from keras_vit.data import augment
from keras_vit.data.pipeline import AUTOTUNE, dataset_options, positioned_stream
from keras_vit.dense.data import read_target
from keras_vit.dense.labels import IGNORE

TARGET_DTYPES = {"semantic": tf.uint8, "depth": tf.float32}


def pairs_dataset(pairs):
    """`(image path, target path)` pairs as a dataset of two byte strings."""
    images, targets = zip(*pairs) if pairs else ((), ())
    paths = [np.asarray([p.encode() if isinstance(p, str) else p for p in ps], dtype=object) for ps in (images, targets)]
    return tf.data.Dataset.from_tensor_slices((paths[0].astype(bytes), paths[1].astype(bytes)))


def load_pair(image_path, target_path, task, depth_scale=None):
    """`(uint8 (H, W, 3) image, (H, W) target)`: the mask's uint8 class ids or the float32 depth."""
    image = augment.to_rgb(tf.io.decode_image(tf.io.read_file(image_path), channels=3, expand_animations=False))
    dtype = TARGET_DTYPES[task]
    # a path comes as bytes in a traced pipeline, as a 0-d array when run eagerly
    target = tf.numpy_function(
        lambda path: read_target(np.asarray(path).item(), depth_scale).astype(dtype.as_numpy_dtype), [target_path], dtype)
    return image, tf.ensure_shape(target, [None, None])


def split_elements(source, split):
    """`(dataset, load)`: the elements of a split of `source` and the function that makes an
    element's `(image, target)` (a folder's paths are read; a tensorflow-datasets split's are pairs)."""
    data = source.train if split == "train" else source.validation
    if isinstance(data, tf.data.Dataset):
        return data, lambda image, target: (image, target)
    return pairs_dataset(data), lambda image, target: load_pair(image, target, source.task, source.depth_scale)


def loaded(source, split):
    """The `(uint8 image, target)` pairs of a split of `source`, in order."""
    data, load = split_elements(source, split)
    return data.map(load, num_parallel_calls=AUTOTUNE)


def nearest(target, size):
    """A `(H, W)` target resized to `size` by nearest neighbour (its values kept)."""
    return tf.image.resize(target[..., None], size, method="nearest")[..., 0]


def paired_crop(image, target, seed, size, area_range, aspect_range, flip):
    """The same random crop window of `image` and `target`, resized to `size` x `size` (image
    bilinear, float32 in [0, 255]; target nearest), and the same horizontal flip draw."""
    crop_seed, flip_seed = tf.unstack(tf.random.experimental.stateless_split(seed, 2))
    begin, crop_size = augment.crop_window(tf.shape(image), crop_seed, area_range, aspect_range)
    image = augment.train_resize(tf.slice(image, begin, crop_size), size)
    target = nearest(tf.slice(target, begin[:2], crop_size[:2]), (size, size))
    if flip:
        flipped = tf.random.stateless_uniform([], flip_seed) < 0.5
        image, target = tf.cond(flipped, lambda: (image[:, ::-1], target[:, ::-1]), lambda: (image, target))
    return tf.ensure_shape(image, [size, size, 3]), tf.ensure_shape(target, [size, size])


def whole_resize(image, target, size):
    """The whole image resized to `size` x `size` (bilinear, antialiased), its target nearest."""
    return (tf.ensure_shape(augment.resize(image, (size, size)), [size, size, 3]),
            tf.ensure_shape(nearest(target, (size, size)), [size, size]))


def finish(images, targets):
    """Images scaled to [-1, 1]; masks as int32 class ids, depth as float32."""
    targets = tf.cast(targets, tf.float32 if targets.dtype == tf.float32 else tf.int32)
    return augment.scale_to_unit(images), targets


def train_dataset(source, augmentation, batch_size, *, seed=0, start=0, shuffle_buffer=10_000, shard=(1, 0),
                  part=(1, 0), deterministic=False):
    """An endless stream of `(images, targets)` batches of `source` (a `DenseSource`), each pair
    cropped and flipped alike (`augmentation`: its size, crop and flip; the rest is for
    classification); `start`, `shard` and `part` as `keras_vit.data.pipeline.train_dataset`'s."""
    if batch_size < 1:
        raise ValueError(f"batch_size={batch_size} must be >= 1.")
    aug = augmentation
    data, load = split_elements(source, "train")
    stream = positioned_stream(source.name, data, source.train_size, batch_size, seed=seed,
                               start=start, shuffle_buffer=shuffle_buffer, shard=shard, part=part)

    def example(position, element):
        key = tf.stack([tf.cast(seed, tf.int64), position])
        image, target = load(*element)
        return paired_crop(image, target, key, aug.image_size, aug.crop_area, aug.crop_aspect, aug.flip)

    stream = stream.map(example, num_parallel_calls=AUTOTUNE, deterministic=deterministic)
    stream = stream.batch(batch_size, drop_remainder=True).map(finish, num_parallel_calls=AUTOTUNE)
    return stream.prefetch(AUTOTUNE).with_options(dataset_options(deterministic))


def eval_dataset(source, image_size, batch_size, *, split="validation", pad_to_multiple=1, part=(1, 0)):
    """`(images, targets)` batches of a split in order, whole images resized to `image_size`.

    With `pad_to_multiple > 1` or `part` every batch has `batch_size` examples (as
    `keras_vit.data.pipeline.eval_dataset`'s), the padding's targets counted nowhere."""
    count = source.validation_size if split == "validation" else source.train_size
    parts, part_index = part
    data, load = split_elements(source, split)
    if parts > 1:
        data = data.enumerate().filter(lambda position, _: (position // batch_size) % parts == part_index)
        data = data.map(lambda position, element: element)
    ds = data.map(lambda *element: whole_resize(*load(*element), image_size), num_parallel_calls=AUTOTUNE)
    if parts > 1 or pad_to_multiple > 1:
        batches = -(-count // (batch_size * parts))
        blank = IGNORE if source.task == "semantic" else 0
        padding = tf.data.Dataset.from_tensors((tf.zeros([image_size, image_size, 3]),
                                                tf.fill([image_size, image_size], tf.cast(blank, TARGET_DTYPES[source.task]))))
        ds = ds.concatenate(padding.repeat()).take(batches * batch_size).batch(batch_size, drop_remainder=True)
    else:
        ds = ds.batch(batch_size)
    return ds.map(finish, num_parallel_calls=AUTOTUNE).prefetch(AUTOTUNE).with_options(dataset_options(True))
