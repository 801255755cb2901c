"""The fast paths of the layers give the numbers of the plain ones (values and gradients)."""

import keras
import numpy as np
import pytest
from keras import ops

from keras_vit.layers import MultiHeadSelfAttention
from keras_vit.layers.fused_attention import dot_product_attention
from keras_vit.layers.linear import Linear, _affine
from keras_vit.layers.sublayer import run
from tests.conftest import BACKEND


def value_and_grads(fn, *args):
    """`fn(*args)` (a scalar) and its gradients with respect to every argument."""
    if BACKEND == "jax":
        import jax

        value, grads = jax.value_and_grad(fn, argnums=tuple(range(len(args))))(*args)
    elif BACKEND == "tensorflow":
        import tensorflow as tf

        args = [tf.convert_to_tensor(a) for a in args]
        with tf.GradientTape() as tape:
            tape.watch(args)
            value = fn(*args)
        grads = tape.gradient(value, args)
    else:
        import torch

        args = [torch.tensor(a, requires_grad=True) for a in args]
        value = fn(*args)
        grads = torch.autograd.grad(value, args)
        value = value.detach()
    return float(ops.convert_to_numpy(value)), [ops.convert_to_numpy(g) for g in grads]


def _stateless(layer):
    """`f(x, *weights)`: the layer applied with the given weight values."""

    def f(x, *weights):
        y, _ = layer.stateless_call(list(weights), [], x)
        return y

    return f


def test_affine_gradient_matches_reference(rng):
    """`_affine`'s hand-written gradient, checked on every backend although only JAX uses it."""
    x = rng.standard_normal((2, 5, 6)).astype("float32")
    kernel = rng.standard_normal((6, 7)).astype("float32")
    bias = rng.standard_normal(7).astype("float32")
    upstream = rng.standard_normal((2, 5, 7)).astype("float32")

    def loss(x, k, b):
        return ops.sum(_affine(x, k, b) * ops.convert_to_tensor(upstream))

    value, (dx, dkernel, dbias) = value_and_grads(loss, x, kernel, bias)
    np.testing.assert_allclose(value, np.sum((x @ kernel + bias) * upstream), rtol=1e-5)
    np.testing.assert_allclose(dx, upstream @ kernel.T, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(dkernel, np.einsum("btk,btn->kn", x, upstream), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(dbias, upstream.sum(axis=(0, 1)), rtol=1e-5, atol=1e-5)


def test_linear_matches_dense_values_and_gradients(rng):
    x = rng.standard_normal((2, 5, 6)).astype("float32")
    linear, dense = Linear(7), keras.layers.Dense(7)
    linear.build(x.shape)
    dense.build(x.shape)
    kernel = rng.standard_normal((6, 7)).astype("float32")
    bias = rng.standard_normal(7).astype("float32")
    target = rng.standard_normal((2, 5, 7)).astype("float32")

    def loss(layer):
        return lambda x, k, b: ops.sum(ops.square(_stateless(layer)(x, k, b) - ops.convert_to_tensor(target)))

    got_value, got_grads = value_and_grads(loss(linear), x, kernel, bias)
    want_value, want_grads = value_and_grads(loss(dense), x, kernel, bias)
    np.testing.assert_allclose(got_value, want_value, rtol=1e-6)
    # Independent reference: d/dW sum((xW + b - t)^2) = 2 x^T (xW + b - t).
    residual = 2 * (x @ kernel + bias - target)
    np.testing.assert_allclose(got_grads[1], np.einsum("btk,btn->kn", x, residual), rtol=1e-4, atol=1e-4)
    for got, want in zip(got_grads, want_grads):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_linear_keeps_dense_weights_and_config():
    layer = Linear(3, name="qkv")
    layer.build((None, 4))
    assert [w.path for w in layer.weights] == ["qkv/kernel", "qkv/bias"]
    assert isinstance(layer, keras.layers.Dense)
    assert Linear.from_config(layer.get_config()).units == 3


def test_linear_falls_back_to_dense_for_what_it_does_not_fuse(rng):
    x = rng.standard_normal((3, 4)).astype("float32")
    for kwargs in ({"use_bias": False}, {"activation": "relu"}):
        linear, dense = Linear(5, **kwargs), keras.layers.Dense(5, **kwargs)
        linear.build(x.shape)
        dense.build(x.shape)
        dense.set_weights(linear.get_weights())
        np.testing.assert_allclose(ops.convert_to_numpy(linear(x)), ops.convert_to_numpy(dense(x)), atol=1e-6)


@pytest.mark.parametrize("heads", [1, 4])
def test_fused_attention_gradients_match_explicit_path(rng, heads):
    """The training path (`ops.dot_product_attention`) and the explicit softmax path give the
    same gradients for the input and every weight."""
    x = rng.standard_normal((2, 9, 16)).astype("float32")
    layer = MultiHeadSelfAttention(heads)
    layer.build(x.shape)
    weights = [ops.convert_to_numpy(w) for w in layer.trainable_variables]

    def loss(explicit):
        def f(x, *w):
            y, _ = layer.stateless_call(list(w), [], x, return_attention_weights=explicit)
            y = y[0] if explicit else y
            return ops.sum(ops.sin(y))

        return f

    fused_value, fused_grads = value_and_grads(loss(False), x, *weights)
    plain_value, plain_grads = value_and_grads(loss(True), x, *weights)
    np.testing.assert_allclose(fused_value, plain_value, rtol=1e-5)
    for got, want in zip(fused_grads, plain_grads):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_fused_attention_is_keras_attention(rng):
    """Outside a JAX GPU's training path it is Keras' attention; on PyTorch it skips Keras'
    flash-attention probe, not the computation."""
    q, k, v = (rng.standard_normal((2, 7, 3, 8)).astype("float32") for _ in range(3))
    np.testing.assert_array_equal(
        ops.convert_to_numpy(dot_product_attention(q, k, v)), ops.convert_to_numpy(ops.dot_product_attention(q, k, v))
    )


def test_sublayer_run_is_the_layer_call_and_keeps_quantised_dispatch(rng):
    x = rng.standard_normal((3, 4)).astype("float32")
    layer = keras.layers.Dense(5)
    layer.build(x.shape)
    np.testing.assert_array_equal(ops.convert_to_numpy(run(layer, x)), ops.convert_to_numpy(layer(x)))
    layer.quantize("int8")  # its `call` alone would use the int8 kernel as if it were float
    np.testing.assert_array_equal(ops.convert_to_numpy(run(layer, x)), ops.convert_to_numpy(layer(x)))


def test_built_model_has_every_layer_built():
    """Sub-layers that `run` calls are built by their parents; an unbuilt one would make every
    `train_on_batch` build the model symbolically again."""
    import keras_vit

    model = keras_vit.VisionTransformer(
        patch_size=4, hidden_dim=16, depth=2, num_heads=2, mlp_dim=32, input_shape=(8, 8, 3), drop_path_rate=0.1
    )
    assert [layer.name for layer in model._flatten_layers() if not layer.built] == []
