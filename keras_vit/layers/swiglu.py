"""The SwiGLU MLP of DINOv2 g/14: Dense -> SiLU(first half) * second half -> Dense."""

import keras
from keras import ops

from keras_vit.layers.mlp import MLPBlock


@keras.saving.register_keras_serializable(package="keras_vit")
class SwiGLUBlock(MLPBlock):
    """Gated MLP with hidden width `mlp_dim`: `dense_0` projects to `2 * mlp_dim` columns
    `[gate | value]` (packed as timm's `SwiGLUPacked` and transformers' `weights_in`), then
    `dense_1(silu(gate) * value)`."""

    packed = 2

    def activate(self, hidden):
        gate, value = ops.split(hidden, 2, axis=-1)
        return ops.silu(gate) * value
