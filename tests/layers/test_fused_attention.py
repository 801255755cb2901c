"""The padded, length-masked attention of the JAX GPU training path gives the unpadded numbers."""

import math

import numpy as np
import pytest
from keras import ops

from keras_vit.layers import MultiHeadSelfAttention, fused_attention
from tests.support import BACKEND
from benchmarks.numpy_vit import softmax
from tests.support.models import value_and_grads

jax_only = pytest.mark.skipif(BACKEND != "jax", reason="the padded path is JAX's")


def numpy_attention(q, k, v):
    q, k, v = (np.asarray(t, np.float64).transpose(0, 2, 1, 3) for t in (q, k, v))
    weights = softmax(q @ k.transpose(0, 1, 3, 2) / math.sqrt(q.shape[-1]))
    return (weights @ v).transpose(0, 2, 1, 3)


@jax_only
@pytest.mark.parametrize("tokens, multiple", [(9, 8), (5, 64), (16, 8)])
def test_padded_attention_matches_unpadded_values_and_gradients(rng, tokens, multiple):
    import jax
    import jax.numpy as jnp

    q, k, v = (rng.standard_normal((2, tokens, 3, 8)).astype("float32") for _ in range(3))
    upstream = jnp.asarray(rng.standard_normal((2, tokens, 3, 8)).astype("float32"))

    def loss(attention):
        return lambda q, k, v: jnp.sum(attention(q, k, v) * upstream)

    def padded(q, k, v):
        return fused_attention.padded_attention(q, k, v, implementation="xla", multiple=multiple)

    def plain(q, k, v):
        return jax.nn.dot_product_attention(q, k, v, implementation="xla")

    out = padded(q, k, v)
    assert out.shape == q.shape
    np.testing.assert_allclose(np.asarray(out), numpy_attention(q, k, v), atol=1e-5)
    got = jax.grad(loss(padded), argnums=(0, 1, 2))(q, k, v)
    want = jax.grad(loss(plain), argnums=(0, 1, 2))(q, k, v)
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), atol=1e-5)


@jax_only
def test_layer_training_through_padded_path_matches_default(rng, monkeypatch):
    """The layer's training call, sent through the padded path (XLA standing in for cuDNN on
    a CPU), gives the default path's output and gradients for the input and every weight."""
    x = rng.standard_normal((2, 9, 16)).astype("float32")
    layer = MultiHeadSelfAttention(4)
    layer.build(x.shape)
    weights = [ops.convert_to_numpy(w) for w in layer.trainable_variables]

    def loss(x, *w):
        y, _ = layer.stateless_call(list(w), [], x, training=True)
        return ops.sum(ops.sin(y))

    default = value_and_grads(loss, x, *weights)
    calls, original = [], fused_attention.padded_attention

    def padded(q, k, v, implementation=None):
        calls.append(implementation)
        return original(q, k, v, implementation="xla", multiple=8)

    monkeypatch.setattr(fused_attention, "padded_implementation", lambda dtype, head_dim: "cudnn")
    monkeypatch.setattr(fused_attention, "padded_attention", padded)
    padded_value, padded_grads = value_and_grads(loss, x, *weights)
    assert calls and set(calls) == {"cudnn"}
    np.testing.assert_allclose(padded_value, default[0], rtol=1e-5)  # a float32 sum of 288 terms
    for got, want in zip(padded_grads, default[1]):
        np.testing.assert_allclose(got, want, atol=1e-5)


def test_no_padded_path_without_a_gpu():
    """On a CPU (and on TensorFlow / PyTorch anywhere) training uses `ops.dot_product_attention`."""
    fused_attention.padded_implementation.cache_clear()
    for dtype in ("float32", "bfloat16", "float16"):
        assert fused_attention.padded_implementation(dtype, 64) is None


def test_layer_output_unchanged_in_training(rng):
    """Training and inference calls agree with the NumPy attention on every backend."""
    x = rng.standard_normal((2, 7, 16)).astype("float32")
    layer = MultiHeadSelfAttention(2)
    layer.build(x.shape)
    kernel, bias = (ops.convert_to_numpy(w) for w in (layer.qkv.kernel, layer.qkv.bias))
    q, k, v = np.split((x @ kernel + bias).reshape(2, 7, 3, 2, 8), 3, axis=2)
    context = numpy_attention(q[:, :, 0], k[:, :, 0], v[:, :, 0]).reshape(2, 7, 16)
    out_kernel, out_bias = (ops.convert_to_numpy(w) for w in (layer.out.kernel, layer.out.bias))
    want = context @ out_kernel + out_bias
    for training in (False, True):
        np.testing.assert_allclose(ops.convert_to_numpy(layer(x, training=training)), want, atol=1e-5)
