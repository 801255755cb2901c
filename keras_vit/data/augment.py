"""Image transforms for the input pipeline, in TensorFlow ops (they run inside `tf.data`).

Per example, randomness is stateless and keyed by a `(2,)` seed so a pipeline is
reproducible and can be resumed at any example (RandAugment: `randaugment`); MixUp and CutMix
(Keras' semantics) are drawn here per batch from a seed (`mix_table`) and applied in the
training step (`on_step`).
"""

import math

import tensorflow as tf


def to_rgb(image):
    """uint8 image with 1, 3 or 4 channels -> 3 channels (grey repeated, alpha dropped)."""
    channels = tf.shape(image)[-1]
    image = tf.cond(channels == 1, lambda: tf.repeat(image[..., :1], 3, axis=-1), lambda: image[..., :3])
    return tf.ensure_shape(image, [None, None, 3])


def crop_window(shape, seed, area_range=(0.05, 1.0), aspect_range=(3 / 4, 4 / 3)):
    """`(begin, size)` of a random crop of an image of `shape` covering `area_range` of its
    area with width / height in `aspect_range` (the whole image if none fits in 10 tries)."""
    begin, size, _ = tf.image.stateless_sample_distorted_bounding_box(
        shape,
        bounding_boxes=tf.constant([[[0.0, 0.0, 1.0, 1.0]]]),
        seed=seed,
        min_object_covered=0.0,
        aspect_ratio_range=aspect_range,
        area_range=area_range,
        max_attempts=10,
        use_image_if_no_bounding_boxes=True,
    )
    return begin, size


def inception_crop(image, size, seed, area_range=(0.05, 1.0), aspect_range=(3 / 4, 4 / 3)):
    """The "inception crop" of the original ViT input pipeline (Szegedy et al., 2015): a
    `crop_window`, resized to `size` x `size`."""
    begin, crop_size = crop_window(tf.shape(image), seed, area_range, aspect_range)
    crop = tf.slice(image, begin, crop_size)
    return tf.ensure_shape(train_resize(crop, size), [size, size, 3])


def resize(image, size):
    """Bilinear resize (antialiased when shrinking) to `size`, float32 in the input's range."""
    return tf.image.resize(tf.cast(image, tf.float32), size, method="bilinear", antialias=True)


def train_resize(crop, size):
    """`resize` of a crop to `size` x `size`, with the cheaper plain bilinear kernel where the
    crop grows on both axes: antialiasing changes nothing there (equal to within 1e-4)."""
    grows = tf.reduce_all(tf.shape(crop)[:2] <= size)
    return tf.cond(
        grows,
        lambda: tf.image.resize(tf.cast(crop, tf.float32), (size, size), method="bilinear"),
        lambda: resize(crop, (size, size)),
    )


def center_crop(image, size, crop_fraction=1.0):
    """Resize the shorter side to `size / crop_fraction`, then take the central `size` square.

    Only that square is computed (the pixels of `resize` to the whole scaled size, cropped):
    a small `crop_fraction` never makes the whole scaled image."""
    shape = tf.cast(tf.shape(image)[:2], tf.float32)
    scale = size / crop_fraction / tf.reduce_min(shape)
    scaled = tf.maximum(tf.cast(tf.round(shape * scale), tf.int32), size)
    corner = tf.cast((scaled - size) // 2, tf.float32)  # top, left of the square in the scaled image
    image = tf.raw_ops.ScaleAndTranslate(  # `tf.image.resize(..., antialias=True)`'s own op, shifted
        images=tf.cast(image, tf.float32)[None], size=[size, size], scale=tf.cast(scaled, tf.float32) / shape,
        translation=-corner, kernel_type="triangle", antialias=True,
    )[0]
    return tf.ensure_shape(image, [size, size, 3])


def scale_to_unit(image):
    """[0, 255] -> [-1, 1], as `keras_vit.preprocess_input`: `(x - 127.5) / 127.5`."""
    return (tf.cast(image, tf.float32) - 127.5) / 127.5


def normalise(image, scaling):
    """[0, 255] -> `(x - scaling.offset) / scaling.scale` per channel (`scaling`: a
    `keras_vit.preprocessing.Preprocessing`, e.g. CLIP's mean / std); "vit"'s is `scale_to_unit`."""
    offset, scale = tf.constant(scaling.offset, tf.float32), tf.constant(scaling.scale, tf.float32)
    return (tf.cast(image, tf.float32) - offset) / scale


def train_transform(image, seed, size, area_range, aspect_range, flip):
    """Inception crop to `size` and an optional horizontal flip; float32 pixels in [0, 255]."""
    crop_seed, flip_seed = tf.unstack(tf.random.experimental.stateless_split(seed, 2))
    image = inception_crop(to_rgb(image), size, crop_seed, area_range, aspect_range)
    if flip:
        image = tf.image.stateless_random_flip_left_right(image, flip_seed)
    return image


def decode_crop(data, seed, area_range=(0.05, 1.0), aspect_range=(3 / 4, 4 / 3)):
    """A `crop_window` of an encoded image (uint8, 3 channels), decoding only that window of
    a JPEG (`tf.image.decode_and_crop_jpeg`: the rows below it and the pixels beside it are
    never colour-converted or upsampled). The window is the one `crop_window` draws for the
    decoded image with the same `seed`; other formats are decoded whole, then cropped."""

    def jpeg():
        begin, size = crop_window(tf.image.extract_jpeg_shape(data), seed, area_range, aspect_range)
        window = tf.stack([begin[0], begin[1], size[0], size[1]])
        return tf.image.decode_and_crop_jpeg(data, window, channels=3)

    def other():
        image = to_rgb(tf.io.decode_image(data, channels=3, expand_animations=False))
        begin, size = crop_window(tf.shape(image), seed, area_range, aspect_range)
        return tf.slice(image, begin, size)

    return tf.ensure_shape(tf.cond(tf.io.is_jpeg(data), jpeg, other), [None, None, 3])


def train_transform_encoded(data, seed, size, area_range, aspect_range, flip):
    """`train_transform` of an encoded image (the same crop and flip for the same `seed`),
    decoding only the crop window of a JPEG (`decode_crop`)."""
    crop_seed, flip_seed = tf.unstack(tf.random.experimental.stateless_split(seed, 2))
    crop = decode_crop(data, crop_seed, area_range, aspect_range)
    image = tf.ensure_shape(train_resize(crop, size), [size, size, 3])
    if flip:
        image = tf.image.stateless_random_flip_left_right(image, flip_seed)
    return image


def eval_transform(image, size, crop_fraction=1.0):
    """Resize + centre crop to `size`; float32 pixels in [0, 255]. `keras_vit.data.images.center_crop`
    is the same operation in NumPy (for `predict` without TensorFlow; tested equal)."""
    return center_crop(to_rgb(image), size, crop_fraction)


def _beta(count, alpha, seed):
    """`count` draws of Beta(alpha, alpha) (a ratio of two gamma draws)."""
    first, second = tf.unstack(tf.random.experimental.stateless_split(seed, 2))
    x = tf.random.stateless_gamma([count], first, alpha)
    return x / (x + tf.random.stateless_gamma([count], second, alpha))


def _mixup_table(seed, count, alpha):
    """MixUp rows of a `mix_table`: weight Beta(alpha, alpha) per example (Keras' `MixUp`)."""
    weight = _beta(count, alpha, seed)
    zeros = tf.zeros([count])
    return tf.stack([zeros, zeros, zeros, zeros, weight, weight, weight], axis=1)


def _cutmix_table(seed, count, height, width, factor):
    """CutMix rows of a `mix_table` (Keras' `CutMix(factor)`): alpha U(0, factor) per batch,
    then per example a box of relative side sqrt(1 - Beta(alpha, alpha)) at a uniform place;
    the label weighted by the area outside it."""
    alpha_seed, weight_seed, place_seed = tf.unstack(tf.random.experimental.stateless_split(seed, 3))
    alpha = tf.random.stateless_uniform([], alpha_seed, 0.0, factor) + 1e-6
    side = tf.sqrt(1.0 - _beta(count, alpha, weight_seed))
    sizes = tf.cast(tf.stack([height, width]), tf.float32)
    lengths = side[:, None] * sizes  # (count, 2): box height, width
    begins = tf.random.stateless_uniform([count, 2], place_seed) * (sizes - lengths)
    ends = begins + lengths
    label = 1.0 - lengths[:, 0] * lengths[:, 1] / (sizes[0] * sizes[1])
    inside, outside = tf.zeros([count]), tf.ones([count])
    return tf.stack([begins[:, 0], begins[:, 1], ends[:, 0], ends[:, 1], inside, outside, label], axis=1)


def mix_table(seed, count, height, width, mixup_alpha, cutmix_alpha):
    """The MixUp / CutMix of a batch of `count` images of `height` x `width`, drawn from the
    `(2,)` `seed`, as the `(count, 7)` table the training step applies (`on_step.mix`, which
    mixes each example with the batch reversed); None when both are off.

    With both, each batch gets one of the two at random (as timm does).
    """
    if mixup_alpha <= 0 and cutmix_alpha <= 0:
        return None
    choice_seed, seed = tf.unstack(tf.random.experimental.stateless_split(seed, 2))
    if cutmix_alpha <= 0:
        return _mixup_table(seed, count, mixup_alpha)
    if mixup_alpha <= 0:
        return _cutmix_table(seed, count, height, width, cutmix_alpha)
    return tf.cond(
        tf.random.stateless_uniform([], choice_seed) < 0.5,
        lambda: _mixup_table(seed, count, mixup_alpha),
        lambda: _cutmix_table(seed, count, height, width, cutmix_alpha),
    )


def simple_crop(image, size, seed, padding=4):
    """DeiT III's simple random crop: the shorter side resized to `size` (`resize`), the image
    padded by `padding` pixels reflected, a random `size` x `size` window."""
    shape = tf.cast(tf.shape(image)[:2], tf.float32)
    scaled = tf.maximum(tf.cast(tf.round(shape * size / tf.reduce_min(shape)), tf.int32), size)
    image = tf.pad(resize(to_rgb(image), scaled), [[padding, padding], [padding, padding], [0, 0]], mode="REFLECT")
    return tf.image.stateless_random_crop(image, [size, size, 3], seed)


def simple_transform(image, seed, size, flip):
    """`simple_crop` to `size` and an optional horizontal flip; float32 pixels in [0, 255]."""
    crop_seed, flip_seed = tf.unstack(tf.random.experimental.stateless_split(seed, 2))
    image = simple_crop(image, size, crop_seed)
    return tf.image.stateless_random_flip_left_right(image, flip_seed) if flip else image


def decode(data):
    """An encoded image, decoded whole to 3 channels."""
    return to_rgb(tf.io.decode_image(data, channels=3, expand_animations=False))


# timm's `RandomErasing` (Zhong et al., 2020) in its "pixel" mode: the box's area and aspect ratio.
ERASE_AREA = (0.02, 1 / 3)
ERASE_ASPECT = (0.3, 1 / 0.3)
ERASE_TRIES = 10


def random_erase(image, seed, probability):
    """With `probability`, one box of area uniform in `ERASE_AREA` of the image's and aspect ratio
    log-uniform in `ERASE_ASPECT` (the first of `ERASE_TRIES` draws that fits) filled with
    per-pixel normal noise of the normalised range (`127.5 + 127.5 * N(0, 1)`, clipped)."""
    apply_seed, area_seed, aspect_seed, place_seed, noise_seed = tf.unstack(
        tf.random.experimental.stateless_split(seed, 5))
    shape = tf.shape(image)
    height, width = shape[0], shape[1]
    area = tf.cast(height * width, tf.float32) * tf.random.stateless_uniform([ERASE_TRIES], area_seed, *ERASE_AREA)
    aspect = tf.exp(tf.random.stateless_uniform([ERASE_TRIES], aspect_seed, *[math.log(a) for a in ERASE_ASPECT]))
    heights = tf.cast(tf.round(tf.sqrt(area * aspect)), tf.int32)
    widths = tf.cast(tf.round(tf.sqrt(area / aspect)), tf.int32)
    fits = (heights < height) & (widths < width) & (heights > 0) & (widths > 0)
    first = tf.argmax(tf.cast(fits, tf.int32))
    box_h, box_w = heights[first], widths[first]
    corner = tf.random.stateless_uniform([2], place_seed)
    top = tf.cast(corner[0] * tf.cast(height - box_h + 1, tf.float32), tf.int32)
    left = tf.cast(corner[1] * tf.cast(width - box_w + 1, tf.float32), tf.int32)
    rows, cols = tf.range(height)[:, None], tf.range(width)[None, :]
    inside = (rows >= top) & (rows < top + box_h) & (cols >= left) & (cols < left + box_w)
    erase = fits[first] & (tf.random.stateless_uniform([], apply_seed) < probability)
    noise = tf.clip_by_value(127.5 + 127.5 * tf.random.stateless_normal(tf.shape(image), noise_seed), 0.0, 255.0)
    return tf.where((inside & erase)[..., None], noise, image)
