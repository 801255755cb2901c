"""Mixed precision: pick and apply a Keras dtype policy.

Under a mixed policy the model's variables stay float32 and its matmuls run in the low
precision, while LayerNorm (Keras' LayerNormalization computes in float32), the attention
softmax, the final "predictions" layer (dtype float32) and the loss stay in float32.
With "mixed_float16", `compile` wraps the optimizer in `keras.optimizers.LossScaleOptimizer`
(dynamic loss scaling). "float32" computes in exact float32 on every device; "tf32" is the
float32 policy with TF32 matmuls and convolutions on Ampere+ GPUs (faster, ~1e-3 relative error;
on CPUs the same as float32).
"""

import functools
import os
import platform

import keras

from keras_vit.utils import matmul_precision
from keras_vit.training.config import PRECISIONS


@functools.lru_cache(maxsize=1)
def cpu_has_bfloat16():
    """True if this CPU has native bfloat16 arithmetic (x86 AVX512_BF16 / AMX, Arm BF16)."""
    if platform.system() == "Linux" and os.path.exists("/proc/cpuinfo"):
        with open("/proc/cpuinfo") as handle:
            flags = set()
            for line in handle:
                if line.startswith(("flags", "Features")):
                    flags.update(line.split(":", 1)[1].split())
        return bool(flags & {"avx512_bf16", "amx_bf16", "bf16"})
    return platform.system() == "Darwin" and platform.machine() == "arm64"


def accelerator():
    """`(kind, compute_capability)` of the backend's first device: kind is tpu/gpu/cpu."""
    backend = keras.backend.backend()
    if backend == "jax":
        import jax

        device = jax.devices()[0]
        if device.platform == "gpu":
            major, _, minor = str(getattr(device, "compute_capability", "0.0")).partition(".")
            return "gpu", (int(major), int(minor or 0))
        return device.platform, None
    if backend == "torch":
        import torch

        if torch.cuda.is_available():
            return "gpu", torch.cuda.get_device_capability()
        return "cpu", None
    import tensorflow as tf

    if tf.config.list_logical_devices("TPU"):
        return "tpu", None
    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        details = tf.config.experimental.get_device_details(gpus[0])
        return "gpu", tuple(details.get("compute_capability", (0, 0)))
    return "cpu", None


def resolve_precision(precision="auto"):
    """The dtype policy name for `precision`; "auto" picks by hardware.

    auto: bfloat16 on TPUs, on GPUs of compute capability >= 8.0 (Ampere and newer) and on
    CPUs with bfloat16 instructions under TensorFlow and PyTorch (oneDNN runs their bf16
    matmuls on those units); float16 (with loss scaling) on older GPUs; else float32. JAX on
    CPU stays float32: XLA's CPU matmuls do not use the bf16 units, so bf16 is slower there
    (benchmarks/RESULTS.md).
    """
    if precision not in PRECISIONS:
        raise ValueError(f"precision={precision!r}; expected one of {PRECISIONS}.")
    if precision != "auto":
        return precision
    kind, capability = accelerator()
    if kind == "tpu":
        return "mixed_bfloat16"
    if kind == "gpu":
        return "mixed_bfloat16" if capability >= (8, 0) else "mixed_float16"
    fast_bf16 = cpu_has_bfloat16() and keras.backend.backend() != "jax"
    return "mixed_bfloat16" if fast_bf16 else "float32"


def apply_precision(precision="auto"):
    """Sets the global Keras dtype policy (before the model is built) and, for float32 /
    tf32, how float32 products compute; returns the resolved precision's name."""
    name = resolve_precision(precision)
    if name in ("float32", "tf32"):
        matmul_precision.set_float32_matmul_precision("tf32" if name == "tf32" else "highest")
    keras.config.set_dtype_policy("float32" if name == "tf32" else name)
    return name
