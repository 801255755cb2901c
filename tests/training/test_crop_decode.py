"""The training pipeline decodes only the crop window of a JPEG (`augment.decode_crop`) and
resizes growing crops with plain bilinear (`augment.train_resize`): the same crops, the same
pixels, the same augmentation statistics as decoding whole images; evaluation unchanged."""

import io

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from keras_vit.data import augment
from keras_vit.data import sources as data
from keras_vit.data import pipeline

pytestmark = pytest.mark.backend_independent  # tf.data code: runs under one backend (tests/conftest.py)

AREA, ASPECT = (0.05, 1.0), (3 / 4, 4 / 3)


def _jpeg(rng, height=75, width=100, quality=95):
    coarse = rng.uniform(0, 255, (6, 8, 3)).astype("float32")
    smooth = tf.image.resize(coarse[None], (height, width))[0].numpy()
    buffer = io.BytesIO()
    Image.fromarray(np.clip(smooth + rng.normal(0, 8, smooth.shape), 0, 255).astype("uint8")).save(
        buffer, "JPEG", quality=quality
    )
    return buffer.getvalue()


@pytest.fixture(scope="module")
def encoded():
    return tf.constant(_jpeg(np.random.default_rng(0)))


def test_crop_decode_is_the_decoded_images_crop(encoded):
    image = tf.io.decode_jpeg(encoded, channels=3)
    for i in range(40):
        seed = tf.constant([7, i], tf.int64)
        begin, size = augment.crop_window(tf.shape(image), seed, AREA, ASPECT)
        crop = augment.decode_crop(encoded, seed, AREA, ASPECT).numpy()
        expected = tf.slice(image, begin, size).numpy()
        assert crop.shape == expected.shape
        # libjpeg's chroma upsampling at the window's edge may differ by a step
        assert np.mean(np.abs(crop.astype(int) - expected)) < 1.0, i


def _areas_and_log_aspects(sizes):
    sizes = np.array(sizes, dtype=float)
    return sizes[:, 0] * sizes[:, 1] / (75 * 100), np.log(sizes[:, 1] / sizes[:, 0])


def test_crop_areas_and_aspects_are_those_of_the_decoded_path(encoded):
    """Over independent seeds, the windows decoded have the area and aspect distribution of the
    inception crop of the decoded image."""
    decoded = [augment.decode_crop(encoded, tf.constant([3, i], tf.int64), AREA, ASPECT).shape[:2] for i in range(300)]
    shape = tf.shape(tf.io.decode_jpeg(encoded, channels=3))
    drawn = [augment.crop_window(shape, tf.constant([4, i], tf.int64), AREA, ASPECT)[1][:2].numpy() for i in range(300)]
    (areas, aspects), (ref_areas, ref_aspects) = _areas_and_log_aspects(decoded), _areas_and_log_aspects(drawn)
    assert areas.min() >= 0.04 and areas.max() <= 1.0 and np.all(np.abs(aspects) <= np.log(4 / 3) + 0.05)
    assert abs(areas.mean() - ref_areas.mean()) < 0.05 and abs(areas.std() - ref_areas.std()) < 0.04
    assert abs(aspects.mean() - ref_aspects.mean()) < 0.04 and abs(aspects.std() - ref_aspects.std()) < 0.03
    assert abs(np.median(areas) - np.median(ref_areas)) < 0.06


def test_png_is_decoded_whole_then_cropped(tmp_path):
    pixels = np.random.default_rng(1).integers(0, 256, (30, 40, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(tmp_path / "x.png")
    seed = tf.constant([1, 2], tf.int64)
    crop = augment.decode_crop(tf.io.read_file(str(tmp_path / "x.png")), seed, AREA, ASPECT).numpy()
    begin, size = augment.crop_window(tf.constant([30, 40, 3]), seed, AREA, ASPECT)
    np.testing.assert_array_equal(crop, tf.slice(pixels, begin, size).numpy())


def test_train_resize_equals_the_antialiased_resize():
    rng = np.random.default_rng(2)
    for shape in ((20, 30, 3), (40, 50, 3), (40, 20, 3)):  # grows, shrinks, both
        crop = tf.constant(rng.integers(0, 256, shape, dtype=np.uint8))
        np.testing.assert_allclose(
            augment.train_resize(crop, 32).numpy(), augment.resize(crop, (32, 32)).numpy(), atol=1e-3
        )


def _folder(root, rng):
    for name in ("a", "b"):
        (root / name).mkdir(parents=True)
        for i in range(3):
            (root / name / f"{i}.jpg").write_bytes(_jpeg(rng, 60 + 5 * i, 80))


def test_folder_training_stream_equals_decoding_whole_images(tmp_path):
    _folder(tmp_path, np.random.default_rng(3))
    source = data.load_source(str(tmp_path), val_fraction=0.34)
    aug = pipeline.Augmentation(image_size=24)
    cropped = pipeline.train_dataset(source, aug, 4, seed=5, deterministic=True)
    whole = pipeline.train_dataset(source.__class__(**{**source.__dict__, "read": None}), aug, 4, seed=5, deterministic=True)
    for (xa, ya), (xb, yb) in zip(cropped.take(3), whole.take(3)):
        np.testing.assert_array_equal(ya.numpy(), yb.numpy())
        assert np.mean(np.abs(xa.numpy() - xb.numpy())) < 2.0 / 127.5


def test_eval_stream_is_unchanged(tmp_path):
    """Evaluation decodes whole images and centre-crops them, as before."""
    _folder(tmp_path, np.random.default_rng(4))
    source = data.load_source(str(tmp_path), val_fraction=0.34)
    images, _ = next(iter(pipeline.eval_dataset(source, 24, 8)))
    paths = [p.numpy().decode() for p, _ in source.validation]
    for image, path in zip(images.numpy(), paths):
        decoded = tf.io.decode_image(tf.io.read_file(path), channels=3, expand_animations=False)
        expected = augment.scale_to_unit(augment.eval_transform(decoded, 24)).numpy()
        np.testing.assert_array_equal(image, expected)
