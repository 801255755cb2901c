"""The fast paths of the layers give the numbers of the plain ones (values and gradients)."""

import keras
import numpy as np
import pytest
from keras import ops

from keras_vit.layers import MultiHeadSelfAttention
from keras_vit.layers.fused_attention import dot_product_attention
from keras_vit.layers.linear import Linear, _affine
from keras_vit.layers.sublayer import run
from tests.support import BACKEND
from tests.support.models import value_and_grads


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


@pytest.mark.parametrize("dtype, tolerance", [("float32", 1e-6), ("bfloat16", 1e-2)])
def test_fused_attention_is_keras_attention(rng, dtype, tolerance):
    """Outside a JAX GPU's training path it is Keras' attention (values and gradients), on
    the strided q/k/v views of one qkv tensor that `MultiHeadSelfAttention` passes; on
    PyTorch without Keras' flash-attention probe or its contiguous copies."""
    qkv = rng.standard_normal((2, 7, 3, 3, 8)).astype("float32")

    def loss(attention):
        def f(qkv):
            qkv = ops.cast(qkv, dtype)
            out = attention(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2])
            return ops.sum(ops.sin(ops.cast(out, "float32")))

        return f

    got_value, (got_grad,) = value_and_grads(loss(dot_product_attention), qkv)
    want_value, (want_grad,) = value_and_grads(loss(ops.dot_product_attention), qkv)
    np.testing.assert_allclose(got_value, want_value, rtol=tolerance)
    np.testing.assert_allclose(got_grad, want_grad, rtol=tolerance, atol=tolerance)


def test_linear_under_mixed_bfloat16_matches_float64_and_dense(rng):
    """The bfloat16 product (on PyTorch one `addmm` with the bias inside) is as close to the
    float64 result as Keras' `Dense`; inputs of another dtype than the kernel take `Dense.call`."""
    x = rng.standard_normal((4, 5, 32)).astype("float32")
    linear, dense = Linear(48, dtype="mixed_bfloat16"), keras.layers.Dense(48, dtype="mixed_bfloat16")
    linear.build(x.shape)
    dense.build(x.shape)
    weights = [0.2 * rng.standard_normal((32, 48)).astype("float32"), rng.standard_normal(48).astype("float32")]
    linear.set_weights(weights)
    dense.set_weights(weights)
    want = x.astype("float64") @ weights[0] + weights[1]
    got = ops.convert_to_numpy(ops.cast(linear(x), "float32"))
    plain = ops.convert_to_numpy(ops.cast(dense(x), "float32"))
    scale = np.abs(want).max()
    assert np.abs(got - want).max() <= max(np.abs(plain - want).max(), 2**-8 * scale)
    np.testing.assert_allclose(got, plain, atol=2**-6 * scale)
    mixed = ops.convert_to_numpy(run(linear, ops.convert_to_tensor(x)))  # float32 input, bfloat16 kernel
    np.testing.assert_array_equal(mixed, ops.convert_to_numpy(dense.call(ops.convert_to_tensor(x))))


@pytest.mark.skipif(BACKEND != "torch", reason="the op sequence PyTorch runs")
def test_torch_attention_forward_fuses_biases_and_copies_nothing(rng):
    """One attention forward on PyTorch: the qkv and out projections are one `addmm` each
    (bias inside the product, no separate add) and q/k/v go to SDPA as views (no copies)."""
    import torch
    from torch.profiler import profile

    x = torch.tensor(rng.standard_normal((2, 9, 16)).astype("float32"))
    layer = MultiHeadSelfAttention(2)
    layer.build(x.shape)
    with profile() as prof:
        layer(x)
    names = [event.name for event in prof.events()]
    assert names.count("aten::addmm") == 2 and "aten::mm" not in names and "aten::add" not in names
    copies = [
        event.name
        for event in prof.events()
        if event.name in ("aten::clone", "aten::copy_", "aten::_to_copy")
        and getattr(event.cpu_parent, "name", None) != "aten::addmm"  # addmm starts from the bias
    ]
    assert copies == []
    assert any("scaled_dot_product" in n for n in names)


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
