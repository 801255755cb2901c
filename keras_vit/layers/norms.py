"""The normalisation layers of `norm=` (vit_config.NORMS): LayerNorm, or RMSNorm (scale only)."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="keras_vit")
class RMSNorm(keras.layers.Layer):
    """`x / sqrt(mean(x^2) + epsilon) * gamma` over the last axis, computed in float32 under
    mixed precision (`torch.nn.RMSNorm`, timm's `RmsNorm`). Its one variable is named `gamma`,
    as LayerNormalization's scale is, so the weight tables treat both alike (RMSNorm has no `beta`)."""

    def __init__(self, epsilon=1e-6, **kwargs):
        super().__init__(**kwargs)
        self.epsilon = float(epsilon)

    def build(self, input_shape):
        self.gamma = self.add_weight(name="gamma", shape=(input_shape[-1],), initializer="ones")

    def call(self, x):
        return ops.rms_normalization(x, scale=self.gamma, axis=-1, epsilon=self.epsilon)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "epsilon": self.epsilon}


def normalization(norm, epsilon, name, dtype=None):
    """The layer of `norm` ("layernorm" or "rmsnorm") with `epsilon`."""
    if norm == "rmsnorm":
        return RMSNorm(epsilon, name=name, dtype=dtype)
    if norm == "layernorm":
        return keras.layers.LayerNormalization(epsilon=epsilon, name=name, dtype=dtype)
    raise ValueError(f"Unknown norm={norm!r}; expected 'layernorm' or 'rmsnorm'.")
