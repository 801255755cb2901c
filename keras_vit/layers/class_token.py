"""The learned [class] token prepended to the patch sequence."""

import keras
from keras import ops

from keras_vit.layers.residual import Float32Stream


@keras.saving.register_keras_serializable(package="keras_vit")
class ClassToken(Float32Stream, keras.layers.Layer):
    """Prepends one learned token: `(batch, n, dim)` -> `(batch, 1 + n, dim)`."""

    def build(self, input_shape):
        self.token = self.add_weight(name="cls", shape=(1, 1, input_shape[-1]), initializer="zeros", autocast=False)

    def call(self, tokens):
        batch = ops.shape(tokens)[0]
        cls = ops.broadcast_to(ops.cast(self.token, tokens.dtype), (batch, 1, ops.shape(tokens)[-1]))
        return ops.concatenate([cls, tokens], axis=1)

    def compute_output_shape(self, input_shape):
        n = None if input_shape[1] is None else input_shape[1] + 1
        return (input_shape[0], n, input_shape[2])
