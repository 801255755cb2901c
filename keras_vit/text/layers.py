"""The two layers a text tower adds to `keras_vit.layers`: token + position embedding, and the
pooling of the sequence at one token per text."""

import keras
from keras import ops

from keras_vit.layers.residual import Float32Stream


@keras.saving.register_keras_serializable(package="keras_vit")
class TextEmbedding(Float32Stream, keras.layers.Layer):
    """`(batch, context)` token ids -> `(batch, context, width)`: the learned `token_embedding`
    row of each id plus the learned `position_embedding` of its position."""

    def __init__(self, vocab_size, context, width, **kwargs):
        super().__init__(**kwargs)
        self.vocab_size, self.context, self.width = int(vocab_size), int(context), int(width)

    def build(self, input_shape):
        init = keras.initializers.RandomNormal(stddev=0.02)
        self.token_embedding = self.add_weight(shape=(self.vocab_size, self.width), initializer=init,
                                               name="token_embedding", autocast=False)
        self.position_embedding = self.add_weight(shape=(self.context, self.width), initializer=init,
                                                  name="position_embedding", autocast=False)

    def call(self, ids):
        tokens = ops.take(self.token_embedding, ops.cast(ids, "int32"), axis=0)
        return tokens + self.position_embedding[None, : ops.shape(ids)[1]]

    def compute_output_shape(self, input_shape):
        return (*input_shape, self.width)

    def get_config(self):
        return {**super().get_config(), "vocab_size": self.vocab_size, "context": self.context, "width": self.width}


@keras.saving.register_keras_serializable(package="keras_vit")
class TextPooling(keras.layers.Layer):
    """`(tokens (batch, context, width), ids (batch, context))` -> `(batch, width)`: the token at
    the first `eos_token_id` (`pooling="eos"`), at the largest id ("argmax") or the last one ("last")."""

    def __init__(self, pooling, eos_token_id=None, **kwargs):
        super().__init__(**kwargs)
        self.pooling, self.eos_token_id = pooling, eos_token_id

    def call(self, tokens, ids):
        if self.pooling == "last":
            return tokens[:, -1]
        ids = ops.cast(ids, "int32")
        keys = ops.cast(ops.equal(ids, self.eos_token_id), "int32") if self.pooling == "eos" else ids
        index = ops.argmax(keys, axis=-1)  # the first of equal maxima
        # a one-hot sum (exact) rather than take_along_axis, whose broadcast fixes the batch in torch.export
        picked = ops.one_hot(index, ops.shape(tokens)[1], dtype=tokens.dtype)
        return ops.sum(tokens * picked[..., None], axis=1)

    def compute_output_shape(self, tokens_shape, ids_shape):
        return (tokens_shape[0], tokens_shape[-1])

    def get_config(self):
        return {**super().get_config(), "pooling": self.pooling, "eos_token_id": self.eos_token_id}
