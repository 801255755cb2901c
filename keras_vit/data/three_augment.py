"""DeiT III's augmentations (Touvron et al., 2022), in TensorFlow ops on float32 pixels in [0, 255].

3-Augment: each image gets exactly one of grayscale, solarisation and Gaussian blur, chosen
uniformly (`three_augment`); then colour jitter (`color_jitter`, DeiT III's 0.3). Their
definitions are PIL's and torchvision's (the recipe's own code): ITU-R 601-2 luma for
grayscale, pixels from 128 up inverted for solarisation, a Gaussian of standard deviation
uniform in [0.1, 2] for the blur, and brightness / contrast / saturation factors uniform in
[1 - j, 1 + j], each blended towards black / the image's mean luma / the pixel's luma.
Randomness is stateless, keyed by a `(2,)` seed, as the rest of the pipeline.
"""

import math

import tensorflow as tf

LUMA = (0.299, 0.587, 0.114)  # ITU-R 601-2, PIL's "L" and torchvision's grayscale
SOLARIZE_THRESHOLD = 128.0
BLUR_SIGMA = (0.1, 2.0)
_BLUR_RADIUS = math.ceil(3 * BLUR_SIGMA[1])  # the kernel covers 3 standard deviations of the widest blur


def luma(image):
    """`(H, W, 1)` luma of an RGB image."""
    return tf.reduce_sum(image * tf.constant(LUMA, image.dtype), axis=-1, keepdims=True)


def grayscale(image):
    """The luma in all three channels."""
    return tf.repeat(luma(image), 3, axis=-1)


def solarize(image, threshold=SOLARIZE_THRESHOLD):
    """Pixels at or above `threshold` inverted (`255 - x`)."""
    return tf.where(image >= threshold, 255.0 - image, image)


def gaussian_blur(image, sigma):
    """A separable Gaussian of standard deviation `sigma` (a scalar tensor), reflected at the edges;
    the kernel spans `_BLUR_RADIUS` pixels each side, enough for the widest `BLUR_SIGMA`."""
    offsets = tf.range(-_BLUR_RADIUS, _BLUR_RADIUS + 1, dtype=tf.float32)
    kernel = tf.exp(-0.5 * tf.square(offsets / sigma))
    kernel /= tf.reduce_sum(kernel)
    padded = tf.pad(image[None], [[0, 0], [_BLUR_RADIUS] * 2, [_BLUR_RADIUS] * 2, [0, 0]], mode="SYMMETRIC")
    rows = tf.tile(tf.reshape(kernel, [-1, 1, 1, 1]), [1, 1, 3, 1])
    blurred = tf.nn.depthwise_conv2d(padded, rows, [1, 1, 1, 1], "VALID")
    columns = tf.reshape(rows, [1, -1, 3, 1])
    return tf.nn.depthwise_conv2d(blurred, columns, [1, 1, 1, 1], "VALID")[0]


def three_augment(image, seed):
    """One of grayscale, solarisation and Gaussian blur (sigma uniform in `BLUR_SIGMA`), uniformly."""
    choice_seed, sigma_seed = tf.unstack(tf.random.experimental.stateless_split(seed, 2))
    choice = tf.random.stateless_uniform([], choice_seed, 0, 3, dtype=tf.int32)
    sigma = tf.random.stateless_uniform([], sigma_seed, *BLUR_SIGMA)
    return tf.switch_case(choice, [lambda: grayscale(image), lambda: solarize(image),
                                   lambda: gaussian_blur(image, sigma)])


def adjust_color(image, brightness, contrast, saturation):
    """Brightness, then contrast, then saturation by the given factors (torchvision's blends, clipped)."""
    image = tf.clip_by_value(image * brightness, 0.0, 255.0)
    mean = tf.reduce_mean(luma(image))
    image = tf.clip_by_value(contrast * image + (1.0 - contrast) * mean, 0.0, 255.0)
    return tf.clip_by_value(saturation * image + (1.0 - saturation) * luma(image), 0.0, 255.0)


def color_jitter(image, seed, strength):
    """Brightness, contrast and saturation factors each uniform in `[1 - strength, 1 + strength]`
    (torchvision's `ColorJitter(strength, strength, strength)`, in this fixed order)."""
    factors = tf.random.stateless_uniform([3], seed, 1.0 - strength, 1.0 + strength)
    return adjust_color(image, factors[0], factors[1], factors[2])
