"""The options the text towers add to `keras_vit.layers`: a causal mask (no token sees a later
one, with and without a `valid` mask, on the fused and the explicit attention paths) and the
`quick_gelu` MLP; the text layers' configs."""

import keras
import numpy as np
import pytest

from keras_vit.layers import MLPBlock, MultiHeadSelfAttention, TransformerBlock
from keras_vit.text.layers import TextEmbedding, TextPooling


def _numpy(x):
    return keras.ops.convert_to_numpy(x)


@pytest.mark.parametrize("explicit", [False, True], ids=["fused", "explicit"])
def test_causal_attention_ignores_later_tokens(explicit):
    rng = np.random.default_rng(0)
    layer = MultiHeadSelfAttention(2, causal=True)
    x = rng.normal(size=(2, 6, 8)).astype(np.float32)
    changed = x.copy()
    changed[:, 4:] = rng.normal(size=(2, 2, 8))
    run = (lambda v: layer(v, return_attention_weights=True)[0]) if explicit else layer
    a, b = _numpy(run(x)), _numpy(run(changed))
    np.testing.assert_allclose(a[:, :4], b[:, :4], atol=1e-6)
    assert np.abs(a[:, 4:] - b[:, 4:]).max() > 1e-3
    weights = _numpy(layer(x, return_attention_weights=True)[1])
    assert np.allclose(np.triu(weights[0, 0], 1), 0)
    valid = np.array([[True] * 6, [True, False, True, True, True, True]])
    masked = _numpy(layer(x, valid=valid, return_attention_weights=True)[1])
    assert np.allclose(masked[1, :, :, 1], 0) and np.allclose(np.triu(masked[1, 0], 1), 0)
    fused = _numpy(layer(x, valid=valid))
    np.testing.assert_allclose(fused, _numpy(layer(x, valid=valid, return_attention_weights=True)[0]), atol=1e-5)


def test_quick_gelu_block_and_configs():
    block = TransformerBlock(2, 16, quick_gelu=True, causal=True)
    again = TransformerBlock.from_config(block.get_config())
    assert again.attention.causal and again.mlp.quick_gelu
    mlp = MLPBlock(4, quick_gelu=True)
    mlp.build((1, 3))
    x = np.linspace(-3, 3, 3, dtype=np.float32)[None]
    hidden = x @ _numpy(mlp.dense_0.kernel) + _numpy(mlp.dense_0.bias)
    expected = (hidden / (1 + np.exp(-1.702 * hidden))) @ _numpy(mlp.dense_1.kernel) + _numpy(mlp.dense_1.bias)
    np.testing.assert_allclose(_numpy(mlp(x)), expected, atol=1e-6)
    for layer in (TextEmbedding(10, 5, 4), TextPooling("eos", 3)):
        assert type(layer).from_config(layer.get_config()).get_config() == layer.get_config()


def test_text_pooling_picks_each_rows_token():
    tokens = np.arange(2 * 4 * 3, dtype=np.float32).reshape(2, 4, 3)
    ids = np.array([[5, 9, 3, 3], [5, 3, 9, 0]])
    for pooling, rows in (("eos", [2, 1]), ("argmax", [1, 2]), ("last", [3, 3])):
        np.testing.assert_array_equal(_numpy(TextPooling(pooling, 3)(tokens, ids)), tokens[[0, 1], rows])

