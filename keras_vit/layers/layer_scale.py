"""LayerScale (Touvron et al., 2021): a learned per-channel scale of a residual branch."""

import keras


@keras.saving.register_keras_serializable(package="keras_vit")
class LayerScale(keras.layers.Layer):
    """`x * gamma`, `gamma` of shape `(dim,)` starting at `init_value` (DeiT III, DINOv2)."""

    def __init__(self, init_value=1e-5, **kwargs):
        super().__init__(**kwargs)
        self.init_value = float(init_value)

    def build(self, input_shape):
        self.gamma = self.add_weight(
            name="gamma", shape=(input_shape[-1],), initializer=keras.initializers.Constant(self.init_value)
        )

    def call(self, x):
        return x * self.gamma

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "init_value": self.init_value}
