"""DeiT III's augmentations against their definitions (PIL, NumPy): 3-Augment's grayscale,
solarisation and Gaussian blur, colour jitter, the simple random crop, random erasing, and
repeated augmentation in the training stream."""

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image, ImageOps

from keras_vit.data import augment, pipeline, three_augment
from keras_vit.data import sources as data

pytestmark = pytest.mark.backend_independent  # tf.data code: runs under one backend (tests/conftest.py)


@pytest.fixture(scope="module")
def image():
    return np.random.default_rng(0).integers(0, 256, (20, 24, 3)).astype("uint8")


def seed(i):
    return tf.constant([7, i], tf.int64)


def test_grayscale_and_solarize_equal_pil(image):
    ours = three_augment.grayscale(tf.constant(image, tf.float32)).numpy()
    pil = np.asarray(Image.fromarray(image).convert("L"), np.float32)
    assert np.abs(ours - pil[..., None]).max() <= 0.5 + 1e-3  # PIL rounds the luma to whole levels
    assert (ours[..., 0] == ours[..., 1]).all() and (ours[..., 1] == ours[..., 2]).all()
    solarized = three_augment.solarize(tf.constant(image, tf.float32)).numpy()
    np.testing.assert_array_equal(solarized, np.asarray(ImageOps.solarize(Image.fromarray(image), 128), np.float32))


def numpy_blur(x, sigma, radius=6):
    offsets = np.arange(-radius, radius + 1)
    kernel = np.exp(-0.5 * (offsets / sigma) ** 2)
    kernel /= kernel.sum()
    padded = np.pad(x.astype(np.float64), [(radius, radius), (radius, radius), (0, 0)], mode="symmetric")
    rows = np.apply_along_axis(lambda v: np.convolve(v, kernel, mode="valid"), 0, padded)
    return np.apply_along_axis(lambda v: np.convolve(v, kernel, mode="valid"), 1, rows)


@pytest.mark.parametrize("sigma", [0.1, 0.8, 2.0])
def test_gaussian_blur_equals_the_separable_gaussian(image, sigma):
    """The Gaussian itself (DeiT III's PIL `GaussianBlur` approximates it by three box blurs)."""
    ours = three_augment.gaussian_blur(tf.constant(image, tf.float32), tf.constant(sigma)).numpy()
    np.testing.assert_allclose(ours, numpy_blur(image, sigma), atol=1e-3)


def test_three_augment_applies_exactly_one_of_the_three(image):
    x = tf.constant(image, tf.float32)
    chosen = []
    for i in range(60):
        out = three_augment.three_augment(x, seed(i)).numpy()
        if np.array_equal(out, three_augment.grayscale(x).numpy()):
            chosen.append("gray")
        elif np.array_equal(out, three_augment.solarize(x).numpy()):
            chosen.append("solarize")
        else:  # a blur of a sigma in [0.1, 2]: within the widest and the narrowest
            assert np.abs(out - image).mean() > 0 and np.abs(out - numpy_blur(image, 2.0)).mean() < np.abs(
                image - numpy_blur(image, 2.0)).mean()
            chosen.append("blur")
    counts = [chosen.count(kind) for kind in ("gray", "solarize", "blur")]
    assert min(counts) >= 10, counts


def test_color_jitter_follows_torchvision_blends(image):
    x = image.astype(np.float64)
    b, c, s = 1.2, 0.8, 1.3
    luma = lambda v: (v * np.array(three_augment.LUMA)).sum(-1, keepdims=True)  # noqa: E731
    want = np.clip(x * b, 0, 255)
    want = np.clip(c * want + (1 - c) * luma(want).mean(), 0, 255)
    want = np.clip(s * want + (1 - s) * luma(want), 0, 255)
    ours = three_augment.adjust_color(tf.constant(image, tf.float32), b, c, s).numpy()
    np.testing.assert_allclose(ours, want, atol=1e-3)
    jittered = three_augment.color_jitter(tf.constant(image, tf.float32), seed(1), 0.3).numpy()
    assert jittered.shape == image.shape and not np.array_equal(jittered, image)


def test_simple_crop_is_a_window_of_the_reflected_image():
    square = np.random.default_rng(1).integers(0, 256, (16, 16, 3)).astype("uint8")  # already the size: no resize
    padded = np.pad(square, [(4, 4), (4, 4), (0, 0)], mode="reflect").astype(np.float32)
    corners = set()
    for i in range(30):
        crop = augment.simple_crop(tf.constant(square), 16, seed(i)).numpy()
        matches = [(t, l) for t in range(9) for l in range(9) if np.array_equal(crop, padded[t:t + 16, l:l + 16])]
        assert matches, i
        corners.add(matches[0])
    assert len(corners) > 10
    wide = augment.simple_crop(tf.zeros((30, 60, 3), tf.uint8), 16, seed(0))  # shorter side resized to 16
    assert wide.shape == (16, 16, 3)


def test_random_erasing_erases_one_box_of_the_declared_area_and_aspect(image):
    x = tf.constant(image, tf.float32)
    np.testing.assert_array_equal(augment.random_erase(x, seed(0), 0.0).numpy(), image)
    erased = 0
    for i in range(40):
        out = augment.random_erase(x, seed(i), 1.0).numpy()
        changed = np.any(out != image, axis=-1)
        if not changed.any():
            continue
        rows, cols = np.nonzero(changed.any(1))[0], np.nonzero(changed.any(0))[0]
        height, width = rows[-1] - rows[0] + 1, cols[-1] - cols[0] + 1
        assert changed[rows[0]:rows[-1] + 1, cols[0]:cols[-1] + 1].mean() > 0.95  # one filled box
        assert 0.02 * 480 * 0.5 <= height * width <= 480 / 3 * 1.6
        erased += 1
    assert erased >= 36  # a box fits in almost every draw
    rate = np.mean([np.any(augment.random_erase(x, seed(i), 0.25).numpy() != image) for i in range(200)])
    assert 0.15 < rate < 0.35


def test_repeated_augmentation_repeats_each_drawn_image_in_a_row():
    rng = np.random.default_rng(2)
    images = rng.integers(0, 256, (12, 10, 10, 3)).astype("uint8")
    source = data.from_arrays((images, np.arange(12) % 3), val_fraction=0.25)
    aug = pipeline.Augmentation(8, repeated_augment=3, crop_area=(0.3, 1.0))
    batches = list(pipeline.train_dataset(source, aug, 3, seed=1, deterministic=True, on_step=True).take(3))
    assert sum(len(y) for _, y in batches) == source.train_size  # a pass keeps its length
    for x, y in batches:  # a batch of 3 = one image three times, augmented three ways
        assert len(set(y.numpy().tolist())) == 1
        assert not np.array_equal(x[0].numpy(), x[1].numpy())
