"""The SwiGLU MLP of DINOv2 g/14: Dense -> SiLU(first half) * second half -> Dense."""

import keras
from keras import ops

from keras_vit.layers.linear import Linear
from keras_vit.layers.sublayer import run


@keras.saving.register_keras_serializable(package="keras_vit")
class SwiGLUBlock(keras.layers.Layer):
    """Gated MLP with hidden width `mlp_dim`: `dense_0` projects to `2 * mlp_dim` columns
    `[gate | value]` (packed as timm's `SwiGLUPacked` and transformers' `weights_in`), then
    `dense_1(silu(gate) * value)`."""

    def __init__(self, mlp_dim, dropout_rate=0.0, seed=None, **kwargs):
        super().__init__(**kwargs)
        self.mlp_dim = int(mlp_dim)
        self.dropout_rate = float(dropout_rate)
        self.seed = seed
        self.dropout = keras.layers.Dropout(self.dropout_rate, seed=seed, dtype=self.dtype_policy)

    def build(self, input_shape):
        self.dense_0 = Linear(2 * self.mlp_dim, name="dense_0", dtype=self.dtype_policy)
        self.dense_0.build(input_shape)
        self.dense_1 = Linear(input_shape[-1], name="dense_1", dtype=self.dtype_policy)
        self.dense_1.build((*input_shape[:-1], self.mlp_dim))
        self.dropout.build(None)

    def call(self, x, training=None):
        gate, value = ops.split(run(self.dense_0, x), 2, axis=-1)
        x = run(self.dropout, ops.silu(gate) * value, training=training)
        return run(self.dropout, run(self.dense_1, x), training=training)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {
            **super().get_config(),
            "mlp_dim": self.mlp_dim,
            "dropout_rate": self.dropout_rate,
            "seed": self.seed,
        }
