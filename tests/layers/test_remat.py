"""Rematerialisation (`remat=True`): each encoder block is recomputed in the backward pass,
the numbers are unchanged, and the option survives saving."""

import keras
import numpy as np
import pytest
from keras import ops

import keras_vit
from keras_vit.training import recipes
from tests.support import BACKEND
from tests.support.models import randomize
from tests.support.models import value_and_grads

ARCH = dict(patch_size=4, hidden_dim=32, depth=2, num_heads=2, mlp_dim=64, input_shape=(16, 16, 3))


def _model(remat, **kwargs):
    keras.utils.set_random_seed(0)
    return keras_vit.VisionTransformer(**ARCH, classes=5, classifier_activation=None, remat=remat, **kwargs)


def _value_and_grads(model, images, labels, weights):
    """The loss and its gradients for every trainable weight, the way the backend's train
    step takes them (TensorFlow: a tape over the variables; JAX, PyTorch: `stateless_call`)."""

    def loss(x, *w):
        keras.utils.set_random_seed(1)
        fixed = [ops.convert_to_numpy(v) for v in model.non_trainable_variables]
        y, _ = model.stateless_call(list(w), fixed, x, training=True)
        return ops.sum(ops.square(y - labels))

    if BACKEND != "tensorflow":
        return value_and_grads(loss, images, *weights)
    import tensorflow as tf

    keras.utils.set_random_seed(1)
    with tf.GradientTape() as tape:
        value = ops.sum(ops.square(model(images, training=True) - labels))
    grads = tape.gradient(value, model.trainable_variables)
    return float(value), [ops.convert_to_numpy(g) for g in grads]


@pytest.fixture
def remat_calls(monkeypatch):
    """The layers wrapped in `keras.remat` (jax.checkpoint, tf.recompute_grad,
    torch.utils.checkpoint) during the test."""
    calls, original = [], keras.remat

    def counting(fn):
        calls.append(fn.func)
        return original(fn)

    monkeypatch.setattr(keras, "remat", counting)
    return calls


@pytest.mark.parametrize("drop_path", [0.0, 0.2])
def test_gradients_with_remat_equal_those_without(rng, remat_calls, drop_path):
    images = rng.uniform(-1, 1, (2, 16, 16, 3)).astype("float32")
    labels = ops.convert_to_tensor(rng.standard_normal((2, 5)).astype("float32"))
    plain = randomize(_model(False, drop_path_rate=drop_path, seed=3))
    remat = _model(True, drop_path_rate=drop_path, seed=3)
    remat.set_weights(plain.get_weights())
    weights = [ops.convert_to_numpy(w) for w in plain.trainable_variables]


    want_value, want_grads = _value_and_grads(plain, images, labels, weights)
    assert remat_calls == []
    got_value, got_grads = _value_and_grads(remat, images, labels, weights)
    blocks = remat.get_layer("encoder").blocks
    if BACKEND == "tensorflow" and drop_path:  # tf.recompute_grad would redraw the masks
        blocks = [b for b in blocks if not b.drop_path_rate]
    assert set(remat_calls) == set(blocks) and len(remat_calls) >= len(blocks)
    np.testing.assert_allclose(got_value, want_value, rtol=1e-6)
    for got, want in zip(got_grads, want_grads):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_remat_round_trips_through_config_and_keras_file(tmp_path, rng):
    model = randomize(_model(True))
    assert model.get_layer("encoder").get_config()["remat"] is True
    path = tmp_path / "vit.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert loaded.get_layer("encoder").remat is True
    images = rng.uniform(-1, 1, (2, 16, 16, 3)).astype("float32")
    np.testing.assert_allclose(loaded.predict(images, verbose=0), model.predict(images, verbose=0), atol=1e-6)
    assert _model(False).get_layer("encoder").get_config()["remat"] is False


def test_recipe_field_and_variant_builders_take_remat():
    config = recipes.recipe("digits").override(["remat=true"])
    assert config.remat is True and recipes.recipe("digits").remat is False
    model = keras_vit.ViTTi16(weights=None, input_shape=(32, 32, 3), classes=3, remat=True)
    assert model.get_layer("encoder").remat is True
