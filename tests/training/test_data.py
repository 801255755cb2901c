"""Data sources and the tf.data pipelines of keras_vit.training (no Keras backend in them)."""

import os
import warnings

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from keras_vit.data import augment
from keras_vit.data import sources as data
from keras_vit.data import pipeline

pytestmark = pytest.mark.backend_independent  # data sources and tf.data code: runs under one backend (tests/conftest.py)

AUG = pipeline.Augmentation(16, crop_area=(0.5, 1.0), flip=True)


def _batches(ds, count):
    return [tuple(np.asarray(t) for t in batch) for _, batch in zip(range(count), ds)]


# ----------------------------------------------------------------------------- sources


def test_digits_source_is_sklearn_digits_as_rgb():
    from sklearn.datasets import load_digits

    source = data.load_source("digits")
    assert (source.train_size, source.validation_size, source.num_classes) == (1438, 359, 10)
    images, labels = next(iter(source.train.batch(2000)))
    images, labels = images.numpy(), labels.numpy()
    assert images.shape == (1438, 8, 8, 3) and images.dtype == np.uint8
    assert np.array_equal(images[..., 0], images[..., 2]) and images.max() == 255
    # every training example is a real digit with its own label
    reference = load_digits()
    lookup = {np.round(im * 255 / 16).astype(np.uint8).tobytes(): t for im, t in zip(reference.images, reference.target)}
    assert all(lookup[im[..., 0].tobytes()] == lab for im, lab in zip(images[:50], labels[:50]))
    # validation: stratified, disjoint from training
    val_labels = np.concatenate([y.numpy() for _, y in source.validation.batch(500)])
    assert np.all(np.bincount(val_labels, minlength=10) >= 30)


def test_digits_honour_val_fraction():
    source = data.load_source("digits", val_fraction=0.5)
    assert source.train_size + source.validation_size == 1797
    assert abs(source.validation_size - 1797 / 2) <= 10


def test_arrays_hold_out_a_stratified_validation_part(rng):
    x = rng.integers(0, 256, (100, 6, 6), dtype=np.uint8)  # grey, no channel axis
    y = np.repeat(np.arange(4), 25)
    source = data.load_source((x, y), val_fraction=0.2)
    assert (source.train_size, source.validation_size, source.num_classes) == (80, 20, 4)
    image, _ = next(iter(source.train))
    assert image.shape == (6, 6, 3)
    with pytest.raises(ValueError, match="labels for"):
        data.load_source((x, y[:-1]))
    with pytest.raises(ValueError, match="integer images must be 0-255 pixel values"):
        data.load_source((x.astype("int16") - 300, y))


def _pixels(source):
    return np.concatenate([x.numpy() for x, _ in source.train.batch(64)])


def test_array_images_integer_pixels_or_float_intensities(rng):
    """Integer arrays are 0-255 pixel values, float arrays intensities in [0, 1]; by dtype, no guessing."""
    pixels = rng.integers(0, 256, (20, 4, 4, 3), dtype=np.uint8)
    y = np.arange(20) % 2

    def load(x):
        return _pixels(data.load_source(((x, y), (x[:2], y[:2]))))

    for x in (pixels, pixels.astype("int64"), pixels / 255.0, (pixels / 255.0).astype("float32")):
        np.testing.assert_array_equal(load(x), pixels, err_msg=str(x.dtype))
    assert load(pixels[..., 0] / 255.0).shape == (20, 4, 4, 3)  # grey, float
    with pytest.raises(ValueError, match=r"float images must be intensities in \[0, 1\].*astype\('uint8'\)"):
        load(pixels.astype("float32"))  # 0-255 as floats: refused, not rounded or guessed
    with pytest.raises(ValueError, match=r"values in \[nan, nan\]"):
        load(np.full((20, 4, 4, 3), np.nan))
    with pytest.raises(ValueError, match="dtype bool; expected integer pixel values 0-255 or float"):
        load(pixels > 128)


def test_npz_with_validation_arrays(tmp_path, rng):
    path = tmp_path / "set.npz"
    x = rng.integers(0, 256, (12, 5, 5, 3), dtype=np.uint8)
    np.savez(path, x_train=x[:8], y_train=np.arange(8) % 3, x_test=x[8:], y_test=np.arange(4) % 3)
    source = data.load_source(str(path))
    assert (source.train_size, source.validation_size, source.num_classes) == (8, 4, 3)
    np.savez(tmp_path / "bad.npz", images=x)
    with pytest.raises(ValueError, match="x_train and y_train"):
        data.load_source(str(tmp_path / "bad.npz"))


def _write_folder(root, rng, per_class=4):
    for name in ("cat", "dog"):
        os.makedirs(root / name)
        for i in range(per_class):
            size = (10 + i, 14)  # varied sizes
            Image.fromarray(rng.integers(0, 256, (*size, 3), dtype=np.uint8)).save(root / name / f"{i}.png")


def test_image_folder_skips_a_corrupt_file_with_a_warning(tmp_path, rng):
    _write_folder(tmp_path, rng, per_class=5)
    (tmp_path / "dog" / "broken.png").write_bytes(b"this is not an image")
    with pytest.warns(UserWarning, match="broken.png"):
        source = data.load_source(str(tmp_path), val_fraction=0.2)
    assert source.class_names == ["cat", "dog"]
    assert (source.train_size, source.validation_size) == (8, 2)
    # the whole train split decodes; every image comes out RGB uint8
    decoded = [source.decode(p, y) for p, y in source.train]
    assert all(im.shape[-1] == 3 and im.dtype == tf.uint8 for im, _ in decoded)
    batches = _batches(pipeline.train_dataset(source, AUG, 4), 3)
    assert batches[0][0].shape == (4, 16, 16, 3)
    with pytest.raises(ValueError, match="broken.png"):
        data.load_source(str(tmp_path), on_corrupt="error")


def test_image_folder_finds_truncated_files_in_the_scan(tmp_path, rng):
    _write_folder(tmp_path, rng, per_class=3)
    for name in ("cat/1.png", "dog/2.png"):  # valid signatures, no end marker
        good = (tmp_path / name).read_bytes()
        (tmp_path / name).write_bytes(good[: len(good) // 2])
    Image.fromarray(rng.integers(0, 256, (12, 12, 3), dtype=np.uint8)).save(tmp_path / "cat" / "3.jpg")
    Image.fromarray(rng.integers(0, 256, (12, 12, 3), dtype=np.uint8)).save(tmp_path / "dog" / "3.bmp")
    with pytest.warns(UserWarning, match=r"Skipping 2 unreadable.*cat/1.png.*dog/2.png"):
        source = data.load_source(str(tmp_path), val_fraction=0.25)
    assert source.train_size + source.validation_size == 6
    with pytest.raises(ValueError, match=r"2 file\(s\) .* not readable images: .*cat/1.png"):
        data.load_source(str(tmp_path), on_corrupt="error")


def test_image_folder_drops_a_file_damaged_inside_in_the_pipeline(tmp_path, rng):
    _write_folder(tmp_path / "train", rng, per_class=2)
    _write_folder(tmp_path / "val", rng, per_class=2)
    damaged = bytearray((tmp_path / "val" / "cat" / "1.png").read_bytes())
    damaged[len(damaged) // 2 : len(damaged) // 2 + 16] = bytes(16)  # complete file, bad pixel data
    (tmp_path / "val" / "cat" / "1.png").write_bytes(damaged)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # signature and end marker look fine: no scan-time warning
        source = data.load_source(str(tmp_path))
    assert (source.train_size, source.validation_size) == (4, 4)
    batches = list(pipeline.eval_dataset(source, 16, 8))
    assert sum(len(y) for _, y in batches) == 3


def test_tfds_source_through_mock_data():
    import tensorflow_datasets as tfds

    with tfds.testing.mock_data(num_examples=12):
        source = data.load_source("cifar10")
        assert source.num_classes == 10 and len(source.class_names) == 10
        assert source.train_size == 12
        images, labels = _batches(pipeline.train_dataset(source, AUG, 4, one_hot=True), 2)[0]
    assert images.shape == (4, 16, 16, 3) and labels.shape == (4, 10)
    assert -1.0 <= images.min() and images.max() <= 1.0


def test_tfds_errors_are_clear(tmp_path):
    with pytest.raises(ValueError, match="Unknown dataset 'cifar_10'.*cifar10.*list_builders"):
        data.load_source("cifar_10")
    with pytest.raises(data.DatasetUnavailableError, match="not prepared.*tfds build mnist"):
        data.load_source("mnist", data_dir=str(tmp_path), download=False)


def test_offline_download_failure_is_clear(tmp_path, monkeypatch):
    import tensorflow_datasets as tfds

    def offline(self, *args, **kwargs):
        raise ConnectionError("Failed to resolve 'storage.googleapis.com'")

    monkeypatch.setattr(tfds.core.DatasetBuilder, "download_and_prepare", offline)
    with pytest.raises(data.DatasetUnavailableError, match="Could not download.*resolve.*offline.*tfds build mnist"):
        data.load_source("mnist", data_dir=str(tmp_path))


def test_missing_paths_are_clear(tmp_path):
    with pytest.raises(FileNotFoundError, match="No such image folder"):
        data.load_source(str(tmp_path / "nothere" / "x"))
    with pytest.raises(FileNotFoundError, match="No such .npz"):
        data.load_source(str(tmp_path / "x.npz"))


# ----------------------------------------------------------------------------- transforms


def test_inception_crop_windows_and_centre_crop():
    shape = tf.constant([40, 60, 3])
    windows = [augment.crop_window(shape, tf.constant([1, i]), (0.3, 0.6), (0.75, 4 / 3)) for i in range(30)]
    sizes = np.array([size.numpy()[:2] for _, size in windows])
    areas = sizes.prod(axis=1) / (40 * 60)
    aspects = sizes[:, 1] / sizes[:, 0]
    assert areas.min() >= 0.28 and areas.max() <= 0.62 and areas.std() > 0.02
    assert aspects.min() >= 0.7 and aspects.max() <= 1.4
    assert all(np.all(b.numpy() + s.numpy() <= [40, 60, 3]) for b, s in windows)
    image = tf.cast(tf.reshape(tf.range(40 * 60 * 3) % 256, (40, 60, 3)), tf.uint8)
    crop = augment.inception_crop(image, 8, tf.constant([1, 2]))
    assert crop.shape == (8, 8, 3) and crop.dtype == tf.float32
    # centre crop of a 40x60 horizontal ramp at 20 px: the middle 40x40 square, halved
    ramp = tf.tile(tf.cast(tf.range(60), tf.float32)[None, :, None], (40, 1, 3))
    crop = augment.center_crop(ramp, 20).numpy()
    assert crop.shape == (20, 20, 3)
    assert abs(crop[0, 0, 0] - 10.5) < 0.6 and abs(crop[0, -1, 0] - 48.5) < 0.6


def test_scaling_matches_preprocess_input():
    from keras_vit import preprocess_input

    x = np.array([[0.0, 127.5, 255.0]], dtype=np.float32)
    np.testing.assert_allclose(augment.scale_to_unit(x).numpy(), preprocess_input(x))


# ----------------------------------------------------------------------------- pipeline


def test_train_stream_is_reproducible_and_resumable():
    source = data.load_source("digits")
    full = _batches(pipeline.train_dataset(source, AUG, 32, seed=3, deterministic=True), 50)  # > 1 epoch
    resumed = _batches(pipeline.train_dataset(source, AUG, 32, seed=3, start=40 * 32, deterministic=True), 10)
    for (xa, ya), (xb, yb) in zip(full[40:], resumed):
        np.testing.assert_array_equal(xa, xb)
        np.testing.assert_array_equal(ya, yb)
    other = _batches(pipeline.train_dataset(source, AUG, 32, seed=4), 1)
    assert not np.array_equal(full[0][0], other[0][0])
    # each pass visits every training example exactly once (44 full batches = 1408 of 1438)
    images = np.concatenate([x for x, _ in full[:44]])
    assert len({im.tobytes() for im in images}) == len(images)
    assert full[0][0].dtype == np.float32 and full[0][1].dtype == np.int32
    assert -1.0 <= full[0][0].min() and full[0][0].max() <= 1.0


def test_randaugment_stream_is_resumable_and_keyed_by_position():
    source = data.load_source("digits")
    aug = pipeline.Augmentation(16, crop_area=(0.5, 1.0), randaugment_ops=2, randaugment_factor=0.5)
    full = _batches(pipeline.train_dataset(source, aug, 16, seed=3, deterministic=True), 6)
    resumed = _batches(pipeline.train_dataset(source, aug, 16, seed=3, start=4 * 16, deterministic=True), 2)
    for (xa, _), (xb, _) in zip(full[4:], resumed):
        np.testing.assert_array_equal(xa, xb)
    # the same examples, crops and flips as without RandAugment, then changed by it
    plain = _batches(pipeline.train_dataset(source, AUG, 16, seed=3, deterministic=True), 1)
    changed = np.abs(full[0][0] - plain[0][0]).max(axis=(1, 2, 3)) > 1e-3
    assert full[0][1].tolist() == plain[0][1].tolist() and changed.mean() > 0.7


def test_shards_partition_the_data():
    source = data.load_source((np.zeros((10, 4, 4, 3), np.uint8), np.arange(10) % 2), val_fraction=0.2)
    labels = []
    for index in range(2):
        ds = source.train.shard(2, index)
        labels.append(sorted(int(y) for _, y in ds))
        assert pipeline.shard_size(source.train_size, 2, index) == len(labels[-1])
    assert sorted(labels[0] + labels[1]) == sorted(int(y) for _, y in source.train)


def test_eval_padding_weights_only_real_examples():
    source = data.load_source("digits")
    batches = list(pipeline.eval_dataset(source, 8, 99, pad_to_multiple=3))
    assert all(len(x) == len(w) == 99 for x, _, w in batches)  # static: every batch full
    assert sum(float(np.sum(w)) for _, _, w in batches) == source.validation_size


def test_randaugment_mixup_cutmix_in_tf_data():
    source = data.load_source("digits")
    aug = pipeline.Augmentation(16, crop_area=(0.5, 1.0), randaugment_ops=2, mixup=0.2, cutmix=1.0)
    (images, table), labels = list(pipeline.train_dataset(source, aug, 16, seed=1, on_step=True).take(3))[-1]
    assert images.shape == (16, 16, 16, 3) and images.dtype == tf.uint8 and labels.shape == (16, 10)
    np.testing.assert_array_equal(labels.numpy().sum(axis=1), 1.0)  # one-hot: the step mixes them
    assert table.shape == (16, 7) and (table[:, 6] < 1.0 - 1e-6).numpy().any()  # some labels are mixed


def test_mixed_stream_is_resumable():
    source = data.load_source("digits")
    aug = pipeline.Augmentation(16, crop_area=(0.5, 1.0), mixup=0.8, cutmix=1.0)
    full = list(pipeline.train_dataset(source, aug, 16, seed=3, deterministic=True, on_step=True).take(6))
    resumed = pipeline.train_dataset(source, aug, 16, seed=3, start=4 * 16, deterministic=True, on_step=True)
    for a, b in zip(full[4:], resumed.take(2)):  # ((images, mix table), labels)
        for xa, xb in zip(tf.nest.flatten(a), tf.nest.flatten(b)):
            np.testing.assert_array_equal(xa, xb)
    assert all((np.asarray(table)[:, 6] < 1 - 1e-6).any() for (_, table), _ in full)  # some labels are mixed


def test_augmentation_validation():
    with pytest.raises(ValueError, match="crop_area"):
        pipeline.Augmentation(16, crop_area=(0.0, 1.0))
    with pytest.raises(ValueError, match="mixup"):
        pipeline.Augmentation(16, mixup=-1)
