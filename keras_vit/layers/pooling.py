"""Reduces the encoder's token sequence to one feature vector."""

import keras
from keras import ops

from keras_vit.layers.naflex import finite_tokens, poisoned

POOLINGS = ("token", "avg")
MODES = (*POOLINGS, "distillation")


@keras.saving.register_keras_serializable(package="keras_vit")
class TokenPooling(keras.layers.Layer):
    """`"token"`: the class token's output (the paper's default); `"avg"`: the mean of the
    patch tokens (paper App. D.3), skipping the `num_prefix_tokens` leading tokens;
    `"distillation"`: the second token (DeiT's distillation token). `call(tokens, valid=mask)`
    averages only the tokens where the `(batch, tokens)` mask is True (NaFlex's padding left out);
    `call(tokens, segments=member)` ("avg") averages each `(batch, images, tokens)` row of the
    boolean `member` on its own: `(batch, images, dim)` (packed images, `keras_vit.data.packing`)."""

    def __init__(self, mode="token", num_prefix_tokens=1, **kwargs):
        super().__init__(**kwargs)
        if mode not in MODES:
            raise ValueError(f"Unknown pooling {mode!r}; expected one of {POOLINGS} or None.")
        self.mode = mode
        self.num_prefix_tokens = int(num_prefix_tokens)

    def call(self, tokens, valid=None, segments=None):
        if self.mode == "token":
            return tokens[:, 0]
        if self.mode == "distillation":
            return tokens[:, 1]
        if segments is not None:  # the other images' tokens taken by selection (`finite_tokens`)
            tokens, bad = finite_tokens(tokens)
            weights = ops.cast(segments, tokens.dtype)
            pooled = ops.einsum("bsn,bnd->bsd", weights, tokens) / ops.maximum(ops.sum(weights, -1)[..., None], 1)
            return poisoned(pooled, segments, bad)
        if valid is not None:
            weights = ops.cast(valid, tokens.dtype)[:, :, None]
            return ops.sum(tokens * weights, axis=1) / ops.sum(weights, axis=1)
        return ops.mean(tokens[:, self.num_prefix_tokens :], axis=1)

    def compute_output_shape(self, tokens_shape, valid_shape=None, segments_shape=None):
        if segments_shape is not None:
            return (tokens_shape[0], segments_shape[1], tokens_shape[-1])
        return (tokens_shape[0], tokens_shape[-1])

    def get_config(self):
        return {**super().get_config(), "mode": self.mode, "num_prefix_tokens": self.num_prefix_tokens}
