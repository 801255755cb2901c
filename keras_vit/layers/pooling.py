"""Reduces the encoder's token sequence to one feature vector."""

import keras
from keras import ops

POOLINGS = ("token", "avg")
MODES = (*POOLINGS, "distillation")


@keras.saving.register_keras_serializable(package="keras_vit")
class TokenPooling(keras.layers.Layer):
    """`"token"`: the class token's output (the paper's default); `"avg"`: the mean of the
    patch tokens (paper App. D.3), skipping the `num_prefix_tokens` leading tokens;
    `"distillation"`: the second token (DeiT's distillation token)."""

    def __init__(self, mode="token", num_prefix_tokens=1, **kwargs):
        super().__init__(**kwargs)
        if mode not in MODES:
            raise ValueError(f"Unknown pooling {mode!r}; expected one of {POOLINGS} or None.")
        self.mode = mode
        self.num_prefix_tokens = int(num_prefix_tokens)

    def call(self, tokens):
        if self.mode == "token":
            return tokens[:, 0]
        if self.mode == "distillation":
            return tokens[:, 1]
        return ops.mean(tokens[:, self.num_prefix_tokens :], axis=1)

    def compute_output_shape(self, input_shape):
        return (input_shape[0], input_shape[-1])

    def get_config(self):
        return {**super().get_config(), "mode": self.mode, "num_prefix_tokens": self.num_prefix_tokens}
