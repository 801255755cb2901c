"""Lays the patch tokens of a sequence out on the image's patch grid."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="keras_vit")
class TokenGrid(keras.layers.Layer):
    """`(batch, prefix + h*w, dim)` tokens -> `(batch, h, w, dim)` patch tokens, the
    `num_prefix_tokens` leading (class) tokens dropped.

    Called as `layer(tokens, patch_grid)`, where `patch_grid` is the `(batch, h, w, dim)`
    output of `PatchEmbedding`, used only for its shape (so any image size works).
    """

    def __init__(self, num_prefix_tokens=1, **kwargs):
        super().__init__(**kwargs)
        self.num_prefix_tokens = int(num_prefix_tokens)

    def call(self, tokens, patch_grid):
        shape = ops.shape(patch_grid)
        return ops.reshape(tokens[:, self.num_prefix_tokens :], (-1, shape[1], shape[2], ops.shape(tokens)[-1]))

    def compute_output_shape(self, tokens_shape, patch_grid_shape):
        return (tokens_shape[0], patch_grid_shape[1], patch_grid_shape[2], tokens_shape[-1])

    def get_config(self):
        return {**super().get_config(), "num_prefix_tokens": self.num_prefix_tokens}
