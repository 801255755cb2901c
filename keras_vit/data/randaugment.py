"""RandAugment (Cubuk et al., 2020) per image in TensorFlow ops, for `tf.data`.

The op set, magnitude ranges and op choice are those of `keras.layers.RandAugment(value_range=
(0, 255), num_ops, factor)` in Keras 3 (tests check each op against the Keras layer): `num_ops`
ops drawn uniformly with replacement from the 11 below, each with its parameters drawn
uniformly from the ranges `factor` gives (an op chosen twice repeats its parameters, as in
Keras). What differs is the cost: Keras computes all 11 ops for every slot and keeps one
(22 image transforms per image for `num_ops=2`); here only the chosen op runs
(`tf.switch_case`), and the randomness is stateless, keyed by a `(2,)` seed, so a pipeline
keyed by example position stays reproducible and resumable.

Keras' magnitudes for `factor = f`: shear factors U(0, f) on both axes with one random sign
(about the top-left corner), translation U(0, f) of the height and width (down / right),
rotation U(0, 360 f) degrees about the centre (reflect fill, bilinear), brightness + U(0, f)
x 255, colour degeneration towards grey by U(0, f), contrast x U(1, 1 + f) about the channel
mean, blur towards the 3x3 smoothing kernel by 1 - U(0, 2 f), posterisation to `bits` in
[1, max(1, int(8 f))) (1 bit when that range is empty), solarisation adding U(0, 255 f) and
inverting above a threshold U(0, 255 f), auto-contrast and histogram equalisation.
Images are float32 pixels in [0, 255], shape (height, width, 3).
"""

import math

import tensorflow as tf

def _uniform(seed, count, high, low=0.0):
    return tf.random.stateless_uniform([count], seed, minval=low, maxval=high, dtype=tf.float32)


def _warp(image, matrix):
    """Keras' affine_transform on TensorFlow: output pixel (x, y) samples the input at
    `matrix` applied to (x, y); bilinear, reflect fill."""
    return tf.raw_ops.ImageProjectiveTransformV3(
        images=image[None],
        transforms=tf.reshape(tf.cast(matrix, tf.float32), [1, 8]),
        output_shape=tf.shape(image)[:2],
        fill_value=0.0,
        interpolation="BILINEAR",
        fill_mode="REFLECT",
    )[0]


# Each op is `op(image, params)`; `draw(seed, factor, image)` gives its random `params`.


def draw_shear(seed, factor, image):
    """(shear_x, shear_y), each U(0, factor), with one random sign for both."""
    sign_draw, shear_y, shear_x = tf.unstack(_uniform(seed, 3, 1.0))
    return tf.where(sign_draw > 0.5, -1.0, 1.0) * factor * tf.stack([shear_x, shear_y])


def shear(image, params):
    return _warp(image, tf.stack([1.0, params[0], 0.0, params[1], 1.0, 0.0, 0.0, 0.0]))


def draw_translate(seed, factor, image):
    """(dx, dy) in pixels: U(0, factor) of the width and of the height."""
    dy, dx = tf.unstack(_uniform(seed, 2, factor) * tf.cast(tf.shape(image)[:2], tf.float32))
    return tf.stack([dx, dy])


def translate(image, params):
    return _warp(image, tf.stack([1.0, 0.0, -params[0], 0.0, 1.0, -params[1], 0.0, 0.0]))


def draw_rotate(seed, factor, image):
    """The angle in degrees, U(0, 360 factor)."""
    return _uniform(seed, 1, factor * 360.0)[0]


def rotate(image, params):
    angle = params * (math.pi / 180.0)
    height, width = tf.unstack(tf.cast(tf.shape(image)[:2], tf.float32))
    cx, cy = 0.5 * (width - 1), 0.5 * (height - 1)
    cos, sin = tf.cos(angle), tf.sin(angle)
    matrix = [cos, -sin, cx - cx * cos + cy * sin, sin, cos, cy - cx * sin - cy * cos, 0.0, 0.0]
    return _warp(image, tf.stack(matrix))


def draw_brightness(seed, factor, image):
    """The value added, U(0, 255 factor)."""
    return _uniform(seed, 1, factor)[0] * 255.0


def brightness(image, params):
    return tf.clip_by_value(image + params, 0.0, 255.0)


def draw_blend(seed, factor, image):
    """A blend weight U(0, factor) (colour degeneration, sharpness)."""
    return _uniform(seed, 1, factor)[0]


def color(image, params):
    grey = tf.tensordot(image, tf.constant([0.2989, 0.5870, 0.1140]), axes=[[-1], [-1]])[..., None]
    return tf.clip_by_value(image + params * (grey - image), 0.0, 255.0)


def draw_contrast(seed, factor, image):
    """The contrast multiplier, U(1, 1 + factor)."""
    return _uniform(seed, 1, 1.0 + factor, 1.0)[0]


def contrast(image, params):
    mean = tf.reduce_mean(tf.reshape(image, [-1, 3]), axis=0)
    return tf.clip_by_value((image - mean) * params + mean, 0.0, 255.0)


def sharpness(image, params):
    a, b = 1.0 / 13.0, 5.0 / 13.0
    kernel = tf.tile(tf.reshape(tf.constant([[a, a, a], [a, b, a], [a, a, a]]), [3, 3, 1, 1]), [1, 1, 3, 1])
    smoothed = tf.nn.depthwise_conv2d(image[None], kernel, [1, 1, 1, 1], "SAME")[0]
    return tf.clip_by_value(image + (1.0 - 2.0 * params) * (smoothed - image), 0.0, 255.0)


def draw_posterize(seed, factor, image):
    """Bits kept, uniform in [1, max(1, int(8 factor))), or 1 when that range is empty."""
    most = max(1, int(8 * factor))
    if most == 1:
        return tf.constant(1, tf.int32)
    return tf.random.stateless_uniform([], seed, minval=1, maxval=most, dtype=tf.int32)


def posterize(image, params):
    shift = tf.cast(8 - params, tf.uint8)
    pixels = tf.cast(image, tf.uint8)
    return tf.cast(tf.bitwise.left_shift(tf.bitwise.right_shift(pixels, shift), shift), tf.float32)


def draw_solarize(seed, factor, image):
    """(addition, threshold), each U(0, 255 factor)."""
    return _uniform(seed, 2, factor * 255.0)


def solarize(image, params):
    image = tf.clip_by_value(image + params[0], 0.0, 255.0)
    return tf.where(image < params[1], image, 255.0 - image)


def draw_nothing(seed, factor, image):
    return tf.zeros([])


def autocontrast(image, params=None):
    pixels = tf.reshape(image, [-1, 3])
    low, high = tf.reduce_min(pixels, axis=0), tf.reduce_max(pixels, axis=0)
    # a flat channel stays as it is: (x - 0) * 1, clipped to [0, 255], is x
    spread = high > low
    low = tf.where(spread, low, 0.0)
    scale = tf.where(spread, 255.0 / tf.where(spread, high - low, 1.0), 1.0)
    return tf.clip_by_value((image - low) * scale, 0.0, 255.0)


def _equalize_channel(channel):
    # Keras bins with x * 255 / 255 and looks up with x / 255 * 255: kept, to give its numbers.
    bins = tf.clip_by_value(tf.cast(channel * 255.0 / 255.0, tf.int32), 0, 255)
    hist = tf.math.bincount(tf.reshape(bins, [-1]), minlength=256, maxlength=256, dtype=tf.float32)
    cdf = tf.cumsum(hist)
    cdf_min = tf.reduce_min(tf.where(cdf > 0, cdf, cdf[-1]))  # the first nonzero: cdf rises
    span = cdf[-1] - cdf_min
    table = tf.clip_by_value(tf.round((cdf - cdf_min) * 255.0 / tf.where(span == 0, 1.0, span)), 0.0, 255.0)
    equalized = tf.gather(table, tf.cast(tf.clip_by_value(channel / 255.0 * 255.0, 0.0, 255.0), tf.int32))
    return tf.where(tf.math.count_nonzero(hist) <= 1, channel, equalized)


def equalize(image, params=None):
    return tf.stack([_equalize_channel(image[..., c]) for c in range(3)], axis=-1)


# name -> (op, draw), in the order of keras.layers.RandAugment._AUGMENT_LAYERS.
OPS = {
    "shear": (shear, draw_shear),
    "translate": (translate, draw_translate),
    "rotate": (rotate, draw_rotate),
    "brightness": (brightness, draw_brightness),
    "color": (color, draw_blend),
    "contrast": (contrast, draw_contrast),
    "sharpness": (sharpness, draw_blend),
    "posterize": (posterize, draw_posterize),
    "solarize": (solarize, draw_solarize),
    "autocontrast": (autocontrast, draw_nothing),
    "equalize": (equalize, draw_nothing),
}


def rand_augment(image, seed, num_ops=2, factor=0.5):
    """`num_ops` RandAugment ops on one float32 [0, 255] image, drawn from the `(2,)` `seed`."""
    if num_ops == 0:
        return image
    choice_seed, param_seed = tf.unstack(tf.random.experimental.stateless_split(seed, 2))
    choices = tf.random.stateless_uniform([num_ops], choice_seed, minval=0, maxval=len(OPS), dtype=tf.int32)
    op_seeds = tf.random.experimental.stateless_split(param_seed, len(OPS))
    shape = image.shape
    for slot in range(num_ops):
        branches = [
            (lambda op=op, draw=draw, k=k, x=image: tf.ensure_shape(op(x, draw(op_seeds[k], factor, x)), shape))
            for k, (op, draw) in enumerate(OPS.values())
        ]
        image = tf.switch_case(choices[slot], branches)
    return image
