"""The architecture options of the families beyond the paper, on tiny random models: saving
and loading, `features`, export round trips, and one clear line for a bad combination."""

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.weights.export import model_checkpoint
from tests.support.models import randomize

TINY = dict(patch_size=8, hidden_dim=32, depth=2, num_heads=2, mlp_dim=64, input_shape=(32, 32, 3), classes=3,
            classifier_activation=None)
OPTIONS = {
    "gap_sincos2d": dict(class_token=False, position_embedding="sincos2d"),
    "map": dict(class_token=False, pooling="map"),
    "distilled": dict(distillation_token=True),
    "registers_layer_scale_swiglu": dict(num_registers=2, layer_scale_init=0.1, mlp="swiglu"),
}


def _numpy(x):
    return keras.ops.convert_to_numpy(x)


@pytest.mark.parametrize("name", OPTIONS)
def test_options_save_load_and_reload_from_their_weights(name, tmp_path, rng):
    model = randomize(keras_vit.VisionTransformer(**TINY, **OPTIONS[name]))
    x = rng.uniform(-1, 1, (2, 32, 32, 3)).astype(np.float32)
    expected = _numpy(model(x))
    model.save(tmp_path / "m.keras")
    np.testing.assert_allclose(_numpy(keras.saving.load_model(tmp_path / "m.keras")(x)), expected, atol=1e-6)
    again = keras_vit.from_checkpoint(model_checkpoint(model), **{k: TINY[k] for k in ("input_shape", "classifier_activation")})
    np.testing.assert_allclose(_numpy(again(x)), expected, atol=1e-6)


def test_the_papers_class_token_free_model_averages_the_normed_patch_tokens(rng):
    model = randomize(keras_vit.VisionTransformer(**TINY, class_token=False))
    assert model.get_layer("pooling").mode == "avg"
    x = rng.uniform(-1, 1, (2, 32, 32, 3)).astype(np.float32)
    tokens = keras_vit.features(model, x, layers=-1, norm=True)
    assert tokens.shape == (2, 16, 32)
    head = model.get_layer("head")
    expected = tokens.mean(1) @ _numpy(head.kernel) + _numpy(head.bias)
    np.testing.assert_allclose(_numpy(model(x)), expected, atol=1e-5)


def test_registers_and_distillation_token_are_left_out_of_the_grid(rng):
    model = keras_vit.VisionTransformer(**TINY, distillation_token=True, num_registers=3)
    x = rng.uniform(-1, 1, (1, 32, 32, 3)).astype(np.float32)
    sequence, grid = keras_vit.features(model, x, layers=[0, 0], norm=True), keras_vit.features(model, x, layers=0, grid=True, norm=True)
    assert sequence[0].shape == (1, 2 + 3 + 16, 32) and grid.shape == (1, 4, 4, 32)
    np.testing.assert_allclose(grid.reshape(1, 16, 32), sequence[0][:, 5:], atol=1e-6)


@pytest.mark.parametrize(
    "options, message",
    [
        (dict(class_token=False, pooling="token"), "pooling='token' reads the class token"),
        (dict(class_token=False, distillation_token=True), "needs the class token"),
        (dict(position_embedding="alibi"), "Unknown position_embedding"),
        (dict(mlp="relu"), "Unknown mlp"),
        (dict(num_registers=-1), "num_registers"),
        (dict(pooling="max"), "Unknown pooling"),
    ],
)
def test_bad_combinations_say_what_is_wrong_in_one_line(options, message):
    with pytest.raises(ValueError, match=message) as error:
        keras_vit.VisionTransformer(**TINY, **options)
    assert "\n" not in str(error.value)
