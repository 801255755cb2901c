"""MixUp / CutMix and the [-1, 1] scaling in the training step (`on_step`), against NumPy."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_vit.training import on_step
from keras_vit.data import augment
from keras_vit.data import sources as data
from keras_vit.data import pipeline
from tests.support import JIT

# Rows: MixUp at 0.3 (no box), CutMix of rows 1-2 x columns 0-2 (box edges between pixels),
# CutMix of an empty box, MixUp at 1.0 (itself only), CutMix of the whole image.
TABLE = np.array([
    [0, 0, 0, 0, 0.3, 0.3, 0.3],
    [0.5, -0.2, 2.5, 2.1, 0.0, 1.0, 1 - 6 / 20],
    [1.0, 1.0, 1.0, 3.0, 0.0, 1.0, 1.0],
    [0, 0, 0, 0, 1.0, 1.0, 1.0],
    [0, 0, 4, 5, 0.0, 1.0, 0.0],
], "float32")


def _numpy_mix(images, labels, table):
    """The mix, written out example by example and pixel by pixel."""
    x = (images.astype("float64") - 127.5) / 127.5
    out, mixed = np.empty_like(x), np.empty_like(labels, dtype="float64")
    count, height, width = x.shape[:3]
    for i in range(count):
        top, left, bottom, right, inside, outside, own = table[i]
        partner = count - 1 - i
        for r in range(height):
            for c in range(width):
                w = inside if (top <= r < bottom and left <= c < right) else outside
                out[i, r, c] = w * x[i, r, c] + (1 - w) * x[partner, r, c]
        mixed[i] = own * labels[i] + (1 - own) * labels[partner]
    return out, mixed


def _batch(count=5, height=4, width=5, classes=3, seed=0):
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, (count, height, width, 3)).astype("uint8")
    return images, np.eye(classes, dtype="float32")[rng.integers(0, classes, count)]


def test_finish_scales_and_mixes_as_numpy_does():
    images, labels = _batch()
    x, y = (keras.ops.convert_to_numpy(t) for t in on_step.finish(((images, TABLE), labels)))
    expected_x, expected_y = _numpy_mix(images, labels, TABLE)
    np.testing.assert_allclose(x, expected_x, atol=1e-6)
    np.testing.assert_allclose(y, expected_y, atol=1e-6)
    plain, same, weights = on_step.finish((images, labels, np.ones(5, "float32")))  # no mix: scaled only
    np.testing.assert_allclose(keras.ops.convert_to_numpy(plain), (images - 127.5) / 127.5, atol=1e-6)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(same), labels)


@pytest.mark.parametrize("jit_compile", [False, True] if keras.backend.backend() == "torch" else [True])
def test_training_step_trains_on_the_mixed_batch(jit_compile):
    """The loss and gradient step of `train_on_batch` are those of the NumPy-mixed batch."""
    images, labels = _batch()
    inputs = keras.Input((4, 5, 3))
    logits = keras.layers.Dense(3, kernel_initializer="glorot_uniform")(keras.layers.Flatten()(inputs))
    model = on_step.TrainingModel(inputs, logits)
    kernel = np.random.default_rng(1).normal(0, 0.1, (60, 3)).astype("float32")
    model.layers[-1].set_weights([kernel, np.zeros(3, "float32")])
    model.compile(keras.optimizers.SGD(0.5), keras.losses.CategoricalCrossentropy(from_logits=True),
                  jit_compile=jit_compile)
    x, y = _numpy_mix(images, labels, TABLE)
    z = x.reshape(5, -1) @ kernel
    p = np.exp(z - z.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    expected_loss = -(y * np.log(p)).sum(axis=1).mean()
    gradient = x.reshape(5, -1).T @ (p - y) / 5
    for step in range(2):  # eager first step, then the compiled one (PyTorch with jit_compile)
        model.layers[-1].set_weights([kernel, np.zeros(3, "float32")])
        loss = model.train_on_batch((images, TABLE), labels)
        np.testing.assert_allclose(loss, expected_loss, rtol=1e-5)
        np.testing.assert_allclose(model.layers[-1].get_weights()[0], kernel - 0.5 * gradient, atol=1e-5)


def test_mix_table_statistics():
    """MixUp weights ~ Beta(0.8, 0.8); CutMix boxes inside the image, of the area the label
    weight says, with areas ~ 1 - Beta(alpha, alpha), alpha ~ U(0, 1); each half the batches."""
    tables = np.stack([augment.mix_table(tf.constant([i, 7], tf.int64), 16, 12, 20, 0.8, 1.0).numpy()
                       for i in range(300)])
    cut = tables[:, 0, 5] == 1.0  # outside weight 1: a CutMix batch
    assert 0.4 < cut.mean() < 0.6
    mixup = tables[~cut]
    np.testing.assert_array_equal(mixup[..., :4], 0)
    weights = mixup[..., 4].ravel()
    np.testing.assert_array_equal(weights, mixup[..., 5].ravel())
    np.testing.assert_array_equal(weights, mixup[..., 6].ravel())
    # Beta(0.8, 0.8): mean 0.5, sd 1 / (2 sqrt(2.6)) = 0.31
    assert abs(weights.mean() - 0.5) < 0.03 and abs(weights.std() - 0.31) < 0.02
    boxes = tables[cut]
    top, left, bottom, right, inside, outside, label = np.moveaxis(boxes, -1, 0)
    assert np.all(inside == 0) and np.all(0 <= top) and np.all(bottom <= 12) and np.all(0 <= left)
    assert np.all(right <= 20 + 1e-4)
    np.testing.assert_allclose((bottom - top) * (right - left) / 240, 1 - label, atol=1e-5)
    np.testing.assert_allclose((bottom - top) / 12, (right - left) / 20, atol=1e-5)  # the image's aspect
    # the area 1 - lambda: lambda ~ Beta(alpha, alpha) is symmetric about 1/2 for every alpha
    assert abs(label.mean() - 0.5) < 0.04 and label.min() < 0.05 and label.max() > 0.95


def test_cutmix_in_the_step_pastes_the_partners_box():
    """Images whose pixels name their example: a CutMix step leaves each its own pixels but a
    rectangle of the reversed batch's, of the area the label weight says."""
    count, size = 8, 12
    images = np.broadcast_to((np.arange(count) * 20 + 10)[:, None, None, None], (count, size, size, 3))
    images = images.astype("uint8")
    labels = np.eye(count, dtype="float32")
    for i in range(20):
        table = augment.mix_table(tf.constant([i, 3], tf.int64), count, size, size, 0.0, 1.0).numpy()
        x, y = (keras.ops.convert_to_numpy(t) for t in on_step.finish(((images, table), labels)))
        np.testing.assert_allclose(y.sum(axis=1), 1.0, rtol=1e-6)
        pixels = np.round(x[..., 0] * 127.5 + 127.5)
        for k in range(count):
            partner = count - 1 - k
            from_partner = pixels[k] == images[partner, 0, 0, 0]
            assert np.all(from_partner | (pixels[k] == images[k, 0, 0, 0]))
            rows, cols = np.nonzero(from_partner)
            if len(rows):
                assert len(rows) == (np.ptp(rows) + 1) * (np.ptp(cols) + 1)  # a rectangle
            assert abs(len(rows) / size**2 - (1 - y[k, k])) <= (2 * size + 1) / size**2


def test_on_step_stream_is_uint8_and_finishes_to_the_host_stream():
    source = data.load_source("digits")
    plain = pipeline.Augmentation(16, crop_area=(0.5, 1.0))
    host = [b for _, b in zip(range(2), pipeline.train_dataset(source, plain, 8, seed=2, deterministic=True))]
    step = [b for _, b in zip(range(2), pipeline.train_dataset(source, plain, 8, seed=2, deterministic=True,
                                                                on_step=True))]
    for (hx, hy), (sx, sy) in zip(host, step):
        assert sx.dtype == tf.uint8
        finished = keras.ops.convert_to_numpy(on_step.finish((sx.numpy(), sy.numpy()))[0])
        np.testing.assert_allclose(finished, hx.numpy(), atol=0.5 / 127.5 + 1e-6)  # rounded to whole pixels
        np.testing.assert_array_equal(sy, hy)
    mixing = pipeline.Augmentation(16, crop_area=(0.5, 1.0), mixup=0.8, cutmix=1.0)
    (images, table), labels = next(iter(pipeline.train_dataset(source, mixing, 8, seed=2, on_step=True)))
    assert images.dtype == tf.uint8 and table.shape == (8, 7) and labels.shape == (8, 10)
    with pytest.raises(ValueError, match="MixUp / CutMix run in the training step"):
        pipeline.train_dataset(source, mixing, 8)


def test_saved_models_predict_as_with_host_scaling(tmp_path, monkeypatch):
    """A run whose step scales the uint8 batches saves the models a run scaling them on the
    host does (the pre-`on_step` path): they take [-1, 1] floats, scaled once."""
    from sklearn.datasets import load_digits

    from keras_vit import preprocess_input
    from keras_vit.training import recipe, train

    digits = load_digits()
    images, classes = (digits.images[:320] * (255 / 16)).astype("uint8"), digits.target[:320]
    config = recipe(
        "digits", image_size=8, patch_size=2, hidden_dim=32, depth=1, num_heads=2, mlp_dim=64, batch_size=64,
        learning_rate=1e-2, warmup_steps=2, weight_decay=0.0, drop_path=0.0, label_smoothing=0.0, epochs=1,
        crop_area=(1.0, 1.0), crop_aspect=(1.0, 1.0), tensorboard=False, verbose=0, val_fraction=0.2,
        jit_compile=JIT,
    )
    probe = preprocess_input(np.repeat(images[:16, :, :, None], 3, axis=-1).astype("float32"))

    def predictions(result):
        return [keras.saving.load_model(p).predict(probe, verbose=0) for p in (result.best_path, result.final_path)]

    on_device = train(config.replace(output_dir=str(tmp_path / "step")), data=(images, classes))
    host_stream = pipeline.train_dataset
    monkeypatch.setattr(pipeline, "train_dataset", lambda *a, **k: host_stream(*a, **{**k, "on_step": False}))
    monkeypatch.setattr(on_step, "TrainingModel", keras.Model)
    on_host = train(config.replace(output_dir=str(tmp_path / "host")), data=(images, classes))
    assert on_device.top1 == on_host.top1
    for a, b in zip(predictions(on_device), predictions(on_host)):
        np.testing.assert_allclose(a, b, atol=1e-5)
