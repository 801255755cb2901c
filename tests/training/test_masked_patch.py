"""Masked patch prediction pre-training: corruption statistics, targets, loss, pretrain -> fine-tune."""

import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_vit import VisionTransformer
from keras_vit.cli import main
from keras_vit.training import masked_patch as mp
from keras_vit.training import pretrain, recipe
from keras_vit.training.pretrain import build_encoder
from keras_vit.training.trainer import build_model
from tests.support import JIT

ARCH = dict(patch_size=2, hidden_dim=32, depth=2, num_heads=2, mlp_dim=64)
TINY = dict(
    model="custom", **ARCH, image_size=8, batch_size=32, steps=4, warmup_steps=1, crop_area=(1.0, 1.0),
    crop_aspect=(1.0, 1.0), tensorboard=False, verbose=0, jit_compile=JIT,
)


def _within(observed, expected, n, sigmas=5):
    """`observed` frequency within `sigmas` binomial standard errors of `expected` over n draws."""
    return abs(observed - expected) <= sigmas * np.sqrt(expected * (1 - expected) / n)


@pytest.mark.parametrize("rate, split", [(0.5, (0.8, 0.1, 0.1)), (0.15, (0.6, 0.3, 0.1))])
def test_corruption_rates_within_sampling_error(rate, split):
    batch, patches = 2000, 64
    kind, source = (t.numpy() for t in mp.sample_corruption(batch, patches, tf.constant([3, 4]), rate, split))
    corrupted = kind != mp.KEEP
    n = corrupted.sum()
    assert _within(corrupted.mean(), rate, kind.size)
    for code, fraction in zip((mp.MASK, mp.RANDOM, mp.SAME), split):
        assert _within((kind == code).sum() / n, fraction, n)
    position = np.broadcast_to(np.arange(patches), kind.shape)
    random = kind == mp.RANDOM
    assert np.all(source[~random] == position[~random])
    assert np.all(source[random] != position[random]) and source.min() >= 0 and source.max() < patches
    # the other patch is uniform over the 63 others: each offset about 1/63 of the draws
    offsets = np.bincount((source[random] - position[random]) % patches, minlength=patches)[1:]
    assert all(_within(count / random.sum(), 1 / (patches - 1), random.sum()) for count in offsets)


def test_corruption_is_a_function_of_the_seed():
    first = mp.sample_corruption(4, 16, tf.constant([1, 2]))
    again = mp.sample_corruption(4, 16, tf.constant([1, 2]))
    other = mp.sample_corruption(4, 16, tf.constant([1, 3]))
    assert np.array_equal(first[0], again[0]) and not np.array_equal(first[0], other[0])


def _numpy_mean_colors(images, p, bits):
    b, h, w, _ = images.shape
    means = images.reshape(b, h // p, p, w // p, p, 3).mean(axis=(2, 4)).reshape(b, -1, 3)
    levels = 2**bits
    q = np.clip(np.floor((means + 1) / 2 * levels), 0, levels - 1).astype(int)
    return q[..., 0] * levels * levels + q[..., 1] * levels + q[..., 2]


@pytest.mark.parametrize("bits", [3, 2])
def test_mean_color_targets_equal_numpy(bits):
    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 256, (6, 12, 8, 3)).astype(np.float32)
    pixels[0, :4, :4] = 255.0  # a white patch: the last class
    pixels[0, :4, 4:8] = 0.0  # a black one: class 0
    pixels[0, 4:8, :4] = [255.0, 0.0, 0.0]  # pure red: the top level of the most significant channel
    images = pixels / 127.5 - 1.0
    targets = mp.mean_color_targets(tf.constant(images), 4, bits).numpy()
    assert targets.shape == (6, 6)
    np.testing.assert_array_equal(targets, _numpy_mean_colors(images.astype(np.float64), 4, bits))
    levels = 2**bits
    assert targets[0, 0] == levels**3 - 1 and targets[0, 1] == 0 and targets[0, 2] == (levels - 1) * levels**2


def test_patch_pixels_in_token_order():
    images = np.random.default_rng(1).uniform(-1, 1, (2, 8, 12, 3)).astype(np.float32)
    pixels = mp.patch_pixels(tf.constant(images), 4).numpy()
    assert pixels.shape == (2, 6, 48)
    np.testing.assert_array_equal(pixels[1, 4], images[1, 4:8, 4:8].reshape(-1))  # row 1, column 1


def test_patch_corruption_layer_equals_numpy():
    rng = np.random.default_rng(2)
    tokens = rng.standard_normal((3, 5, 4)).astype(np.float32)
    kind = rng.integers(0, 4, (3, 5)).astype(np.int32)
    source = rng.integers(0, 5, (3, 5)).astype(np.int32)
    layer = mp.PatchCorruption()
    out = keras.ops.convert_to_numpy(layer(tokens, kind, source))
    mask = keras.ops.convert_to_numpy(layer.mask_token)
    expected = tokens.copy()
    for b, i in zip(*np.nonzero(kind == mp.MASK)):
        expected[b, i] = mask
    for b, i in zip(*np.nonzero(kind == mp.RANDOM)):
        expected[b, i] = tokens[b, source[b, i]]
    np.testing.assert_array_equal(out, expected)


def _batch(batch=8, size=8, patch=2, **settings):
    images = np.random.default_rng(3).integers(0, 256, (batch, size, size, 3)).astype(np.float32) / 127.5 - 1
    data = tf.data.Dataset.from_tensors((images, np.zeros(batch, np.int64)))
    return next(iter(mp.corrupt_batches(data, patch, seed=5, **settings)))


def test_corrupt_batches_drops_labels_and_weights_corrupted_patches():
    inputs, targets, weights = (tf.nest.map_structure(np.asarray, part) for part in _batch())
    assert sorted(inputs) == ["images", "kind", "source"] and targets.shape == weights.shape == (8, 16)
    np.testing.assert_array_equal(weights, (inputs["kind"] != mp.KEEP).astype(np.float32))
    np.testing.assert_array_equal(targets, _numpy_mean_colors(inputs["images"].astype(np.float64), 2, 3))


@pytest.mark.parametrize("target", ["color", "pixels"])
def test_loss_covers_corrupted_patches_only(target):
    encoder = VisionTransformer(**ARCH, include_top=False, input_shape=(8, 8, 3))
    model = mp.build_pretraining_model(encoder, target)
    loss, _ = mp.loss_and_metrics(target)
    model.compile(optimizer="sgd", loss=loss)
    inputs, targets, weights = (tf.nest.map_structure(np.asarray, part) for part in _batch(target=target))
    output = keras.ops.convert_to_numpy(model(inputs)).astype(np.float64)
    corrupted = weights > 0
    if target == "color":
        logp = output - output.max(-1, keepdims=True)
        logp -= np.log(np.exp(logp).sum(-1, keepdims=True))
        per_patch = -np.take_along_axis(logp, targets[..., None].astype(int), -1)[..., 0]
    else:
        per_patch = ((output - targets) ** 2).mean(-1)
    expected = per_patch[corrupted].mean()
    loss_value = model.test_on_batch(inputs, targets, sample_weight=weights)
    np.testing.assert_allclose(loss_value, expected, rtol=1e-5)
    # other targets at the uncorrupted patches change nothing
    changed = targets.copy()
    changed[~corrupted] = changed[~corrupted][::-1] + (1 if target == "color" else 0.5)
    np.testing.assert_allclose(model.test_on_batch(inputs, changed, sample_weight=weights), loss_value, rtol=1e-6)


@pytest.mark.parametrize("options", [{}, dict(pre_norm=True)], ids=["vit", "pre_norm"])
def test_pretraining_model_shares_the_encoder_weights(options):
    encoder = VisionTransformer(**ARCH, include_top=False, input_shape=(8, 8, 3), **options)
    model = mp.build_pretraining_model(encoder)
    encoder_ids = {id(v) for v in encoder.weights}
    extra = [v.path for v in model.weights if id(v) not in encoder_ids]
    assert encoder_ids <= {id(v) for v in model.weights}
    assert sorted(extra) == ["corruption/mask_token", "prediction_head/bias", "prediction_head/kernel"]
    assert model.output.shape == (None, 16, 512)


@pytest.mark.parametrize("options", [dict(position_embedding="rope"), dict(num_registers=2),
                                     dict(position_embedding="rope", rope_form="axial", rope_absolute=True)])
def test_pretraining_model_rejects_what_it_would_leave_out(options):
    with pytest.raises(ValueError, match="no register tokens, no position_embedding='rope'"):
        mp.build_pretraining_model(VisionTransformer(**ARCH, include_top=False, input_shape=(8, 8, 3), **options))


def test_pretraining_model_rejects_a_classifier():
    with pytest.raises(ValueError, match="include_top=False and pooling=None"):
        mp.build_pretraining_model(VisionTransformer(**ARCH, input_shape=(8, 8, 3), classes=3))


@pytest.mark.parametrize(
    "overrides, message",
    [({"mask_rate": 0.0}, "mask_rate"), ({"mask_split": (0.8, 0.1)}, "mask_split"),
     ({"mask_target": "depth"}, "mask_target"), ({"color_bits": 9}, "color_bits")],
)
def test_bad_settings_are_refused(tmp_path, overrides, message):
    with pytest.raises(ValueError, match=message):
        pretrain(recipe("masked_patch_digits", **TINY, output_dir=str(tmp_path)), **overrides)


def test_pretrain_writes_an_encoder_that_fine_tuning_loads(tmp_path):
    config = recipe("masked_patch_digits", **TINY, output_dir=str(tmp_path / "pre"))
    result = pretrain(config)
    assert result.steps == 4 and np.isfinite(result.val_loss) and 0 <= result.val_accuracy <= 1
    assert os.path.exists(result.encoder_path)
    saved = {v.path: keras.ops.convert_to_numpy(v) for v in result.encoder.weights}
    keras.utils.set_random_seed(config.seed)  # as pretrain() does before building the encoder
    initial = build_encoder(config).get_layer("embedding").get_weights()[0]
    assert initial.shape == saved["embedding/kernel"].shape
    assert not np.allclose(saved["embedding/kernel"], initial)  # it trained
    classifier = build_model(recipe("digits", **TINY, weights=result.encoder_path), num_classes=10)
    loaded = {v.path: keras.ops.convert_to_numpy(v) for v in classifier.weights}
    assert set(loaded) - set(saved) == {"head/kernel", "head/bias"}
    for path, value in saved.items():
        np.testing.assert_array_equal(loaded[path], value, err_msg=path)
    with pytest.raises(ValueError, match="mask_rate: 0.5 -> 0.3"):  # resuming needs the same objective
        pretrain(config, mask_rate=0.3)


def test_cli_pretrain_then_train_from_the_encoder(tmp_path, capsys):
    flags = ["--image-size", "8", "--patch-size", "2", "--hidden-dim", "32", "--depth", "2", "--num-heads", "2",
             "--mlp-dim", "64", "--steps", "2", "--batch-size", "32", "--tensorboard", "false", "--verbose", "0",
             "--set", f"jit_compile={JIT}"]
    pre = tmp_path / "pre"
    assert main(["pretrain", "--output-dir", str(pre), "--mask-rate", "0.4", *flags]) == 0
    assert f"Saved the encoder to {pre}/encoder.keras" in capsys.readouterr().out
    assert main(["train", "--output-dir", str(tmp_path / "fine"), "--weights", str(pre / "encoder.keras"), *flags]) == 0
    assert "Validation top-1" in capsys.readouterr().out
    with pytest.raises(SystemExit) as refused:  # its choices are checked as the flags are parsed
        main(["pretrain", "--output-dir", str(pre), "--mask-target", "depth", *flags])
    assert refused.value.code == 2
    assert "--mask-target: invalid choice: 'depth' (choose from 'color', 'pixels')" in capsys.readouterr().err
