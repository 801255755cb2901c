"""A `Dense` layer whose weight gradient is laid out for XLA's CPU matmuls."""

import keras
import numpy as np
from keras import ops


def _affine(x, kernel, bias):
    """`x @ kernel + bias` over the last axis, with a hand-written gradient.

    The gradient is the usual one, but the kernel's is computed as `(g^T x)^T` rather
    than `x^T g`. XLA on CPU wants the contracted axis of the second operand of a matmul
    innermost, so for `x^T g` it transposes the incoming gradient `g`; when `g` is the
    residual stream's gradient, XLA fuses the whole chain of later blocks' gradient sums
    into each such transpose and recomputes it there, which makes training cost grow with
    the square of the depth. With `(g^T x)^T` it is the activation `x`, already in memory,
    that gets transposed.
    """

    @ops.custom_gradient
    def affine(x, kernel, bias):
        def grad(*args, upstream=None):
            g = args[0] if upstream is None else upstream
            units, features = ops.shape(kernel)[1], ops.shape(kernel)[0]
            g2 = ops.reshape(g, (-1, units))
            x2 = ops.reshape(x, (-1, features))
            dx = ops.matmul(g, ops.transpose(kernel))
            dkernel = ops.transpose(ops.matmul(ops.transpose(g2), x2))
            return dx, dkernel, ops.sum(g2, axis=0)

        return ops.add(ops.matmul(x, kernel), bias), grad

    return affine(x, kernel, bias)


def _read(variable):
    """A plain tensor with the variable's current value. A TensorFlow Keras variable is
    itself a tensor that is read lazily: a custom gradient would read it again outside
    `stateless_call`'s scope (getting the wrong values) and TensorFlow refuses custom
    gradients that touch variables. A reshape to its own shape is a free read everywhere."""
    return ops.reshape(variable, ops.shape(variable))


def _torch_linear(x, kernel, bias):
    """`x @ kernel + bias` on PyTorch as one `torch.nn.functional.linear` (an `addmm` with
    the bias added in the product, as transformers' and timm's layers do), where `Dense.call`
    runs a Keras matmul and a Keras add: one op instead of two, and no Keras dispatch."""
    import torch

    return torch.nn.functional.linear(x, kernel.T, bias)


def _saved_quantization(store, kernel_shape, use_bias):
    """`(mode, config)` of the variables `Dense.save_own_variables` wrote to `store`
    (`(None, None)`: float): float8 adds six scale / history variables to kernel and bias,
    int8 and int4 an int8 kernel and its scale; int4 packs two rows in a byte and, in
    blocks along the input, adds zero points and the row -> block map."""
    extra = len(store.keys()) - 1 - int(use_bias)
    if extra == 6:
        return "float8", None
    kernel = store["0"]
    if extra <= 0 or str(kernel.dtype) != "int8":
        return None, None
    if tuple(kernel.shape) == kernel_shape:
        return "int8", None
    from keras.quantizers import Int4QuantizationConfig

    if extra == 1:  # one scale per output
        return "int4", Int4QuantizationConfig(block_size=-1)
    blocks = store[str(1 + int(use_bias))].shape[0]
    return "int4", Int4QuantizationConfig(block_size=-(-kernel_shape[0] // blocks))


@keras.saving.register_keras_serializable(package="keras_vit")
class Linear(keras.layers.Dense):
    """`keras.layers.Dense` (same weights `kernel`, `bias`, same outputs) computed by
    `_affine` on JAX, whose train step XLA compiles for CPU, and by `_torch_linear` on
    PyTorch. On TensorFlow, and for what those do not cover (no bias, an activation, LoRA,
    quantisation, inputs of another dtype than the kernel), it is `Dense.call`; TensorFlow's
    XLA does not show the pathology `_affine` avoids.

    `quantize` is `Dense`'s (int8, int4, float8: `model.quantize` covers the encoder), which
    refuses subclasses unless told they compute what `Dense` does, as this one does. The
    layers that create a `Linear` give it their own (float) dtype policy, so a quantized
    model loads its float layout: `load_own_variables` reads the quantization mode off the
    saved variables and quantizes the layer before loading them. With LoRA enabled, the
    saved variables are the frozen kernel, the bias, the LoRA matrices A and B and their
    scale, so that a run resumes with the update it had; a layer without LoRA loads them
    as the merged kernel `kernel + scale * A @ B`."""

    def quantize(self, mode=None, type_check=True, config=None):
        super().quantize(mode, type_check=False, config=config)

    def save_own_variables(self, store):
        if not (self.built and self.lora_enabled and self.quantization_mode is None):
            return super().save_own_variables(store)
        scale = np.float32(self.lora_alpha / self.lora_rank)
        values = [self._kernel, self.bias, self.lora_kernel_a, self.lora_kernel_b, scale]
        for index, value in enumerate(v for v in values if v is not None):
            store[str(index)] = ops.convert_to_numpy(value)

    def load_own_variables(self, store):
        use_bias = self.bias is not None
        count = 4 + int(use_bias)  # kernel, bias, A, B, and the scale: a scalar
        lora = (self.built and self.quantization_mode is None and len(store.keys()) == count
                and len(store[str(count - 1)].shape) == 0)
        if lora and self.lora_enabled:
            variables = [self._kernel, self.bias, self.lora_kernel_a, self.lora_kernel_b]
            for index, variable in enumerate(v for v in variables if v is not None):
                variable.assign(store[str(index)])
            return
        if lora:  # into a layer without LoRA: the update folded into the kernel
            a, b, scale = (np.asarray(store[str(i)]) for i in range(1 + use_bias, 4 + use_bias))
            self._kernel.assign(np.asarray(store["0"]) + scale * (a @ b))
            if use_bias:
                self.bias.assign(store["1"])
            return
        if self.built and self.quantization_mode is None and not self.lora_enabled:
            mode, config = _saved_quantization(store, tuple(self.kernel.shape), use_bias)
            if mode is not None:
                self.quantize(mode, config=config)
        super().load_own_variables(store)

    def call(self, inputs, training=None):
        backend = keras.backend.backend()
        plain = (
            self.bias is None
            or self.activation is not keras.activations.linear
            or self.lora_enabled
            or self.quantization_mode is not None
        )
        if not plain and backend == "jax":
            return _affine(inputs, _read(self.kernel), _read(self.bias))
        if not plain and backend == "torch":
            kernel = ops.convert_to_tensor(self.kernel)
            if inputs.dtype == kernel.dtype:
                return _torch_linear(inputs, kernel, ops.convert_to_tensor(self.bias))
        return super().call(inputs, training=training)
