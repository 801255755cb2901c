"""Fixed 2-D sin-cos position embeddings (big_vision `posemb="sincos2d"`; MAE's frequencies, AIMv2's native models)."""

import keras
import numpy as np
from keras import ops

from keras_vit.layers.residual import Float32Stream

TEMPERATURE = 10_000.0


def sincos_table(h, w, dim, temperature=TEMPERATURE, form="big_vision"):
    """`(h * w, dim)` embeddings, row-major over the grid: `[sin(x w), cos(x w), sin(y w),
    cos(y w)]` with `w = temperature ** -(arange(dim / 4) / n)`, `n = dim / 4 - 1` (big_vision)
    or `dim / 4` (`form="mae"`: MAE, AIMv2). Symbolic sizes work."""
    quarter = dim // 4
    steps = quarter if form == "mae" else max(quarter - 1, 1)
    omega = 1.0 / temperature ** (np.arange(quarter, dtype=np.float64) / steps)
    omega = ops.convert_to_tensor(omega.astype(np.float32))
    y = ops.repeat(ops.arange(h, dtype="float32"), w)
    x = ops.tile(ops.arange(w, dtype="float32"), [h])
    x, y = ops.expand_dims(x, 1) * omega, ops.expand_dims(y, 1) * omega
    return ops.concatenate([ops.sin(x), ops.cos(x), ops.sin(y), ops.cos(y)], axis=1)


@keras.saving.register_keras_serializable(package="keras_vit")
class SinCosPositionEmbedding(Float32Stream, keras.layers.Layer):
    """Adds fixed sin-cos embeddings to the patch tokens of `(batch, prefix + h*w, dim)`
    (the `num_prefix_tokens` leading tokens get none). No variables: any grid works.
    Called as `layer(tokens, patch_grid)` like `PositionEmbedding`; `grid_size` is the
    default grid (what `embeddings` shows); `form`: the frequencies of `sincos_table`."""

    def __init__(self, grid_size, num_prefix_tokens=0, form="big_vision", **kwargs):
        super().__init__(**kwargs)
        self.grid_size = tuple(int(s) for s in grid_size)
        self.num_prefix_tokens = int(num_prefix_tokens)
        self.form = form

    def build(self, tokens_shape, patch_grid_shape=None):
        if tokens_shape[-1] % 4:
            raise ValueError(f"sincos2d position embeddings need a width divisible by 4, got {tokens_shape[-1]}.")
        self.dim = tokens_shape[-1]

    @property
    def embeddings(self):
        """The `(1, prefix + rows * columns, dim)` table of the default grid (prefix rows zero)."""
        table = ops.convert_to_numpy(sincos_table(*self.grid_size, self.dim, form=self.form))
        return np.concatenate([np.zeros((self.num_prefix_tokens, self.dim), np.float32), table])[None]

    def call(self, tokens, patch_grid=None):
        h, w = self.grid_size if patch_grid is None else (ops.shape(patch_grid)[1], ops.shape(patch_grid)[2])
        table = ops.cast(sincos_table(h, w, self.dim, form=self.form), tokens.dtype)
        prefix = ops.zeros((self.num_prefix_tokens, self.dim), tokens.dtype)
        return tokens + ops.concatenate([prefix, table], axis=0)[None]

    def compute_output_shape(self, tokens_shape, patch_grid_shape=None):
        return tokens_shape

    def get_config(self):
        return {**super().get_config(), "grid_size": self.grid_size, "num_prefix_tokens": self.num_prefix_tokens,
                "form": self.form}
