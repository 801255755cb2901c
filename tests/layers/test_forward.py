"""The ViT forward pass against an independent NumPy implementation of the paper's equations."""

import keras
import numpy as np
import pytest
import scipy.ndimage

import keras_vit
from keras_vit.layers import MultiHeadSelfAttention, PositionEmbedding
from benchmarks.numpy_vit import reference_params
from tests.support.models import randomize
from benchmarks.numpy_vit import self_attention, vit_forward

TINY = dict(patch_size=8, hidden_dim=32, depth=2, num_heads=4, mlp_dim=64)


def tiny(**kwargs):
    return randomize(keras_vit.VisionTransformer(**{**TINY, **kwargs}))


@pytest.mark.parametrize("approximate_gelu", [True, False])
@pytest.mark.parametrize("pooling", ["token", "avg"])
def test_logits_match_numpy_reference(rng, approximate_gelu, pooling):
    model = tiny(
        input_shape=(32, 48, 3),
        classes=7,
        classifier_activation=None,
        approximate_gelu=approximate_gelu,
        pooling=pooling,
    )
    images = rng.uniform(-1, 1, (2, 32, 48, 3)).astype("float32")
    expected, _ = vit_forward(
        images, reference_params(model, 4), 8, 4, approximate_gelu=approximate_gelu, pooling=pooling
    )
    np.testing.assert_allclose(model.predict(images, verbose=0), expected, atol=1e-4, rtol=1e-4)


def test_token_sequence_and_attention_weights_match_reference(rng):
    model = tiny(input_shape=(32, 32, 3), include_top=False)
    images = rng.uniform(-1, 1, (2, 32, 32, 3)).astype("float32")
    expected, expected_attention = vit_forward(images, reference_params(model, 4), 8, 4)
    tokens = model.predict(images, verbose=0)
    assert tokens.shape == (2, 17, 32)
    np.testing.assert_allclose(tokens, expected, atol=1e-4)

    encoder = model.get_layer("encoder")
    encoder_input = keras.Model(model.input, encoder.input)(images)
    out, attention = encoder(encoder_input, return_attention_weights=True)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(out), expected, atol=1e-4)
    assert len(attention) == 2
    for got, want in zip(attention, expected_attention):
        assert tuple(got.shape) == (2, 4, 17, 17)
        np.testing.assert_allclose(keras.ops.convert_to_numpy(got), want, atol=1e-5)


def test_fused_and_explicit_attention_agree(rng):
    layer = MultiHeadSelfAttention(num_heads=4)
    x = rng.standard_normal((2, 10, 32)).astype("float32")
    fused = keras.ops.convert_to_numpy(layer(x))
    explicit, weights = layer(x, return_attention_weights=True)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(explicit), fused, atol=1e-5)
    qkv, qkv_b = (keras.ops.convert_to_numpy(v) for v in layer.qkv.weights)
    out_w, out_b = (keras.ops.convert_to_numpy(v) for v in layer.out.weights)
    params = dict(
        q_w=qkv[:, :32], k_w=qkv[:, 32:64], v_w=qkv[:, 64:], q_b=qkv_b[:32], k_b=qkv_b[32:64],
        v_b=qkv_b[64:], o_w=out_w, o_b=out_b,
    )
    want, want_weights = self_attention(x.astype(np.float64), params, 4)
    np.testing.assert_allclose(fused, want, atol=1e-5)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(weights), want_weights, atol=1e-6)


def test_runtime_position_embedding_interpolation_matches_scipy_zoom(rng):
    layer = PositionEmbedding(grid_size=(3, 4))
    tokens = np.zeros((1, 1 + 5 * 7, 6), "float32")
    grid = np.zeros((1, 5, 7, 6), "float32")
    out = keras.ops.convert_to_numpy(layer(tokens, grid))
    table = keras.ops.convert_to_numpy(layer.embeddings)
    np.testing.assert_array_equal(out[0, 0], table[0, 0])
    zoomed = scipy.ndimage.zoom(table[0, 1:].reshape(3, 4, 6), (5 / 3, 7 / 4, 1), order=1)
    np.testing.assert_allclose(out[0, 1:].reshape(5, 7, 6), zoomed, atol=1e-6)


def test_any_resolution_model_equals_fixed_models(rng):
    """A model built for (None, None, 3) equals a fixed-size model at the build grid, and at
    another size equals a fixed-size model given the interpolated position embeddings."""
    fixed = tiny(input_shape=(32, 32, 3), classes=5)
    dynamic = keras_vit.VisionTransformer(**TINY, input_shape=(None, None, 3), classes=5)
    assert dynamic.get_layer("posembed_input").grid_size == (28, 28)
    weights = fixed.get_weights()
    posemb = keras_vit.layers.resize_position_embedding(weights[3], (28, 28))
    dynamic.set_weights(weights[:3] + [posemb] + weights[4:])

    other = keras_vit.VisionTransformer(**TINY, input_shape=(48, 40, 3), classes=5)
    other.set_weights(weights[:3] + [keras_vit.layers.resize_position_embedding(posemb, (6, 5))] + weights[4:])
    images = rng.uniform(-1, 1, (2, 48, 40, 3)).astype("float32")
    np.testing.assert_allclose(
        dynamic.predict(images, verbose=0), other.predict(images, verbose=0), atol=1e-5
    )


def test_dropout_and_stochastic_depth_only_act_in_training(rng):
    model = tiny(input_shape=(16, 16, 3), dropout_rate=0.3, attention_dropout_rate=0.3, drop_path_rate=0.5, seed=1)
    images = rng.uniform(-1, 1, (4, 16, 16, 3)).astype("float32")
    a, b = (keras.ops.convert_to_numpy(model(images, training=False)) for _ in range(2))
    np.testing.assert_array_equal(a, b)
    c = keras.ops.convert_to_numpy(model(images, training=True))
    assert np.abs(a - c).max() > 1e-4


def test_drop_path_drops_whole_examples(rng):
    layer = keras_vit.layers.DropPath(0.5, seed=3)
    x = np.ones((64, 5, 3), "float32")
    y = keras.ops.convert_to_numpy(layer(x, training=True))
    per_example = y.reshape(64, -1)
    assert set(np.unique(per_example)) <= {0.0, 2.0}
    assert np.all(per_example.min(1) == per_example.max(1))
    assert 10 < (per_example[:, 0] == 0).sum() < 54
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(layer(x, training=False)), x)


def test_mixed_bfloat16_keeps_float32_variables_norms_and_outputs(rng):
    keras.config.set_dtype_policy("mixed_bfloat16")
    model = keras_vit.VisionTransformer(**TINY, input_shape=(16, 16, 3), classes=3)
    assert all(v.dtype == "float32" for v in model.weights)
    encoder = model.get_layer("encoder")
    assert encoder.blocks[0].attention.compute_dtype == "bfloat16"
    images = rng.uniform(-1, 1, (2, 16, 16, 3)).astype("float32")
    out = model(images)
    assert keras.backend.standardize_dtype(out.dtype) == "float32"
    tokens = keras.Model(model.input, encoder.input)(images)
    _, attention = encoder(tokens, return_attention_weights=True)
    assert keras.backend.standardize_dtype(attention[0].dtype) == "float32"
    np.testing.assert_allclose(keras.ops.convert_to_numpy(keras.ops.sum(attention[0], -1)), 1.0, atol=1e-5)


@pytest.mark.parametrize(
    "layer",
    [
        keras_vit.layers.PatchEmbedding(4, 8),
        keras_vit.layers.ClassToken(),
        keras_vit.layers.PositionEmbedding((2, 3), num_prefix_tokens=1),
        keras_vit.layers.MultiHeadSelfAttention(2, dropout_rate=0.1),
        keras_vit.layers.MLPBlock(16, 0.1, approximate_gelu=False),
        keras_vit.layers.TransformerBlock(2, 16, 0.1, 0.1, 0.2, False, 1e-5),
        keras_vit.layers.Encoder(2, 2, 16, drop_path_rate=0.1, seed=4),
        keras_vit.layers.TokenPooling("avg"),
        keras_vit.layers.DropPath(0.2),
    ],
    ids=lambda layer: type(layer).__name__,
)
def test_layer_config_round_trip(layer):
    config = layer.get_config()
    clone = type(layer).from_config(config)
    assert clone.get_config() == config
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(layer))
    assert type(restored) is type(layer)
