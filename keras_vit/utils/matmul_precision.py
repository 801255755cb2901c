"""How float32 matmuls and convolutions compute: exactly, or as TF32 on NVIDIA GPUs.

On Ampere and newer GPUs, XLA (JAX, TensorFlow) and cuDNN (PyTorch convolutions) run float32
products as TF32 (10-bit mantissa) by default, so a "float32" model is off by ~1e-3. Building a
keras_vit model whose compute dtype is float32 switches the running backend to exact float32
products unless TF32 was chosen with `set_float32_matmul_precision("tf32")` (or
`precision="tf32"` in training). The setting is the backend's, process-wide: JAX's
`jax_default_matmul_precision`, PyTorch's `allow_tf32` flags, TensorFlow's
`enable_tensor_float_32_execution`. On CPUs both settings compute the same.
"""

import keras

MODES = ("highest", "tf32")
_chosen = None


def set_float32_matmul_precision(mode):
    """Exact float32 ("highest") or TF32 ("tf32") products for the running Keras backend."""
    global _chosen
    if mode not in MODES:
        raise ValueError(f"float32 matmul precision {mode!r}; expected one of {MODES}.")
    _apply(mode)
    _chosen = mode


def _apply(mode):
    tf32 = mode == "tf32"
    backend = keras.backend.backend()
    if backend == "jax":
        import jax

        jax.config.update("jax_default_matmul_precision", "tensorfloat32" if tf32 else "highest")
    elif backend == "torch":
        import torch

        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32
    elif backend == "tensorflow":
        import tensorflow as tf

        tf.config.experimental.enable_tensor_float_32_execution(tf32)


def float32_matmul_precision():
    """The running backend's current setting: "highest" or "tf32"."""
    backend = keras.backend.backend()
    if backend == "jax":
        import jax

        return "highest" if jax.config.jax_default_matmul_precision in ("highest", "float32") else "tf32"
    if backend == "torch":
        import torch

        return "tf32" if torch.backends.cuda.matmul.allow_tf32 or torch.backends.cudnn.allow_tf32 else "highest"
    if backend == "tensorflow":
        import tensorflow as tf

        return "tf32" if tf.config.experimental.tensor_float_32_execution_enabled() else "highest"
    return "highest"


def exact_float32_for(policy):
    """Called for every model built: with a float32 compute dtype, exact products unless TF32
    was chosen. Mixed-precision models keep the backend's setting."""
    if keras.dtype_policies.get(policy).compute_dtype == "float32" and _chosen is None:
        _apply("highest")
