"""Learned tokens inserted into the token sequence: DeiT's distillation token, DINOv2's registers."""

import keras
from keras import ops

from keras_vit.layers.residual import Float32Stream


@keras.saving.register_keras_serializable(package="keras_vit")
class LearnedTokens(Float32Stream, keras.layers.Layer):
    """Inserts `num_tokens` learned tokens after the first `offset` tokens:
    `(batch, n, dim)` -> `(batch, n + num_tokens, dim)`."""

    def __init__(self, num_tokens, offset=0, **kwargs):
        super().__init__(**kwargs)
        self.num_tokens = int(num_tokens)
        self.offset = int(offset)
        if self.num_tokens < 1 or self.offset < 0:
            raise ValueError(f"num_tokens={num_tokens} must be positive and offset={offset} non-negative.")

    def build(self, input_shape):
        self.tokens = self.add_weight(
            name="tokens", shape=(1, self.num_tokens, input_shape[-1]), initializer="zeros", autocast=False
        )

    def call(self, tokens):
        batch, dim = ops.shape(tokens)[0], ops.shape(tokens)[-1]
        new = ops.broadcast_to(ops.cast(self.tokens, tokens.dtype), (batch, self.num_tokens, dim))
        if self.offset == 0:  # no empty `tokens[:, :0]`: LiteRT's interpreter reads that slice as the whole sequence
            return ops.concatenate([new, tokens], axis=1)
        return ops.concatenate([tokens[:, : self.offset], new, tokens[:, self.offset :]], axis=1)

    def compute_output_shape(self, input_shape):
        n = None if input_shape[1] is None else input_shape[1] + self.num_tokens
        return (input_shape[0], n, input_shape[2])

    def get_config(self):
        return {**super().get_config(), "num_tokens": self.num_tokens, "offset": self.offset}
