"""keras_vit.data.randaugment: Keras' RandAugment ops and magnitudes, per image, stateless."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_vit.data import randaugment

pytestmark = pytest.mark.backend_independent  # tf.data code: runs under one backend (tests/conftest.py)

FACTOR = 0.5


@pytest.fixture(scope="module")
def image():
    """A fixed 24 x 20 RGB image with structure (ramps) and noise, float32 in [0, 255]."""
    rng = np.random.default_rng(0)
    y, x = np.mgrid[:24, :20].astype("float32")
    ramps = np.stack([x * 12, y * 10, (x + y) * 5], axis=-1)
    return np.clip(ramps + rng.normal(0, 20, ramps.shape), 0, 255).round().astype("float32")


@pytest.fixture(scope="module")
def keras_layers():
    """The sub-layers of Keras' own RandAugment, on TensorFlow ops whatever the backend."""
    layer = keras.layers.RandAugment(value_range=(0, 255), num_ops=2, factor=FACTOR)
    for name in layer._AUGMENT_LAYERS:
        getattr(layer, name).backend.set_backend("tensorflow")
    return layer


def _keras_transformation(name, params, layer, image):
    """Keras' transformation dict for our drawn `params` of op `name`."""
    value = tf.reshape(tf.constant(params, tf.float32), [1, 1, 1, 1]) if np.ndim(params) == 0 else None
    if name == "shear":
        return {"shear_factor": tf.constant([params], tf.float32)}
    if name == "translate":
        return {"translations": tf.constant([params], tf.float32)}
    if name == "rotate":
        height, width = image.shape[:2]
        zeros, ones = tf.zeros([1]), tf.ones([1])
        matrix = layer.random_rotation._compute_affine_matrix(
            0.5, 0.5, tf.constant([params], tf.float32), zeros, zeros, ones, zeros, zeros, height, width
        )
        return {"rotation_matrix": matrix}
    if name == "brightness":
        return {"rgb_delta": value}
    if name in ("color", "sharpness"):
        return {"factor": value if name == "color" else tf.reshape(value, [1])}
    if name == "contrast":
        return {"contrast_factor": value}
    if name == "posterize":
        return {"shift_factor": tf.constant([8 - int(params)], tf.uint8)}
    if name == "solarize":
        return {"additions": tf.reshape(params[0], (1, 1, 1, 1)), "thresholds": tf.reshape(params[1], (1, 1, 1, 1))}
    return None


KERAS_NAMES = dict(zip(randaugment.OPS, keras.layers.RandAugment._AUGMENT_LAYERS))


@pytest.mark.parametrize("name", list(randaugment.OPS))
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_each_op_matches_keras_randaugment_layer(name, seed, image, keras_layers):
    op, draw = randaugment.OPS[name]
    params = draw(tf.constant([seed, 7]), FACTOR, tf.constant(image)).numpy()
    ours = op(tf.constant(image), tf.constant(params)).numpy()
    reference_layer = getattr(keras_layers, KERAS_NAMES[name])
    transformation = _keras_transformation(name, params, keras_layers, image)
    reference = np.asarray(reference_layer.transform_images(tf.constant(image[None]), transformation))[0]
    assert ours.shape == image.shape and ours.dtype == np.float32
    np.testing.assert_allclose(ours, reference, atol=1e-3)
    if name not in ("autocontrast", "equalize") or seed == 0:
        assert not np.allclose(ours, image, atol=0.5), name  # it does something


def _draws(name, factor, count=400):
    draw = randaugment.OPS[name][1]
    shape = tf.zeros([24, 20, 3])
    return np.array([draw(tf.constant([i, 3]), factor, shape).numpy() for i in range(count)])


def test_magnitudes_span_keras_ranges():
    shears = _draws("shear", FACTOR)
    assert np.all(np.abs(shears) <= FACTOR) and (np.sign(shears[:, 0]) == np.sign(shears[:, 1])).all()
    assert 0.35 < (shears[:, 0] < 0).mean() < 0.65 and np.abs(shears).max() > 0.45
    translations = _draws("translate", FACTOR)
    assert translations.min() >= 0 and translations[:, 0].max() <= 10 and translations[:, 1].max() <= 12
    assert translations[:, 0].max() > 9 and translations[:, 1].max() > 11
    angles = _draws("rotate", FACTOR)
    assert angles.min() >= 0 and 170 < angles.max() <= 180
    assert 0 <= _draws("brightness", FACTOR).min() and 120 < _draws("brightness", FACTOR).max() <= 127.5
    contrasts = _draws("contrast", FACTOR)
    assert 1 <= contrasts.min() < 1.05 and 1.45 < contrasts.max() <= 1.5
    assert sorted(set(_draws("posterize", FACTOR))) == [1, 2, 3]  # Keras: bits in [1, int(8 * 0.5))
    assert set(_draws("posterize", 0.1, 10)) == {1}
    solarize = _draws("solarize", FACTOR)
    assert solarize.min() >= 0 and 120 < solarize.max() <= 127.5


@pytest.mark.parametrize("name", ["shear", "translate", "rotate", "brightness", "color", "contrast"])
def test_factor_zero_is_identity_where_keras_is(name, image):
    op, draw = randaugment.OPS[name]
    out = op(tf.constant(image), draw(tf.constant([5, 5]), 0.0, tf.constant(image))).numpy()
    np.testing.assert_allclose(out, image, atol=1e-3)


def test_rand_augment_applies_the_chosen_ops_in_turn(image):
    """The result is op_2(op_1(image)) with Keras' uniform choice, and is a pure function of the seed."""
    x = tf.constant(image)
    outputs = [randaugment.rand_augment(x, tf.constant([s, 1]), 2, FACTOR).numpy() for s in range(60)]
    np.testing.assert_array_equal(outputs[3], randaugment.rand_augment(x, tf.constant([3, 1]), 2, FACTOR).numpy())
    assert len({o.tobytes() for o in outputs}) > 50
    assert all(o.shape == image.shape and 0 <= o.min() and o.max() <= 255 for o in outputs)
    # seed 0: recompute the same two draws by hand
    choice_seed, param_seed = tf.unstack(tf.random.experimental.stateless_split(tf.constant([0, 1]), 2))
    choices = tf.random.stateless_uniform([2], choice_seed, 0, 11, dtype=tf.int32).numpy()
    op_seeds = tf.random.experimental.stateless_split(param_seed, 11)
    expected = x
    for k in choices:
        op, draw = list(randaugment.OPS.values())[k]
        expected = op(expected, draw(op_seeds[k], FACTOR, expected))
    np.testing.assert_allclose(outputs[0], expected.numpy(), atol=1e-4)
    np.testing.assert_array_equal(randaugment.rand_augment(x, tf.constant([0, 1]), 0, FACTOR).numpy(), image)


def test_op_choice_is_uniform_over_the_eleven_ops():
    seeds = tf.random.experimental.stateless_split(tf.constant([9, 9]), 2000)
    counts = np.zeros(11)
    for seed in seeds:
        choice_seed = tf.random.experimental.stateless_split(seed, 2)[0]
        choices = tf.random.stateless_uniform([2], choice_seed, 0, 11, dtype=tf.int32).numpy()
        counts += np.bincount(choices, minlength=11)
    assert counts.sum() == 4000 and counts.min() > 280 and counts.max() < 450  # 364 expected each


def test_rand_augment_in_tf_data_is_deterministic_under_parallel_map(image):
    data = tf.data.Dataset.range(16).map(
        lambda i: randaugment.rand_augment(tf.constant(image), tf.stack([tf.constant(4, tf.int64), i]), 2, FACTOR),
        num_parallel_calls=4,
        deterministic=False,
    )
    first = sorted(x.tobytes() for x in data.as_numpy_iterator())
    second = sorted(x.tobytes() for x in data.as_numpy_iterator())
    assert first == second


def test_pixel_ops_against_numpy(image):
    """Solarize, posterize, brightness, contrast and auto-contrast at fixed magnitudes, in NumPy."""
    x = tf.constant(image)
    added = np.clip(image + 20.0, 0, 255)
    np.testing.assert_allclose(
        randaugment.solarize(x, tf.constant([20.0, 100.0])).numpy(), np.where(added < 100, added, 255 - added)
    )
    np.testing.assert_array_equal(randaugment.posterize(x, tf.constant(3)).numpy(), image.astype(np.uint8) & 0b11100000)
    np.testing.assert_allclose(randaugment.brightness(x, tf.constant(60.0)).numpy(), np.clip(image + 60, 0, 255))
    mean = image.mean(axis=(0, 1))
    np.testing.assert_allclose(
        randaugment.contrast(x, tf.constant(1.3)).numpy(), np.clip((image - mean) * 1.3 + mean, 0, 255), atol=1e-3
    )
    low, high = image.min(axis=(0, 1)), image.max(axis=(0, 1))
    np.testing.assert_allclose(
        randaugment.autocontrast(x).numpy(), (image - low) * 255 / (high - low), rtol=1e-5, atol=1e-3
    )
