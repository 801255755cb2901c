"""Learned 1-D position embeddings, resizable to another patch grid."""

import keras
import numpy as np
from keras import ops

from keras_vit.layers.residual import Float32Stream
from keras_vit.patch_grid import grid_size_of

INTERPOLATIONS = ("bilinear", "bicubic")


def _linear_matrix(n_in, n_out):
    """`(n_out, n_in)` weights of corner-aligned linear interpolation (as
    `scipy.ndimage.zoom(order=1)`, which the original code uses). Works on symbolic sizes."""
    index = ops.arange(n_out, dtype="float32")
    step = (n_in - 1) / ops.maximum(ops.max(index), 1.0)  # max(index) = n_out - 1, also for a traced size
    pos = index * step
    lo = ops.minimum(ops.floor(pos), n_in - 1)
    frac = ops.expand_dims(pos - lo, -1)
    lo = ops.cast(lo, "int32")
    hi = ops.minimum(lo + 1, n_in - 1)
    return ops.one_hot(lo, n_in) * (1.0 - frac) + ops.one_hot(hi, n_in) * frac


def _cubic_matrix(n_in, n_out, a=-0.75):
    """`(n_out, n_in)` weights of half-pixel bicubic interpolation with clamped borders
    (as `torch.nn.functional.interpolate(mode="bicubic", align_corners=False)`)."""
    src = (np.arange(n_out) + 0.5) * (n_in / n_out) - 0.5
    base = np.floor(src)
    t = src - base
    weights = np.zeros((n_out, n_in), np.float64)
    for offset in (-1, 0, 1, 2):
        d = np.abs(t - offset)
        w = np.where(
            d <= 1,
            (a + 2) * d**3 - (a + 3) * d**2 + 1,
            np.where(d < 2, a * d**3 - 5 * a * d**2 + 8 * a * d - 4 * a, 0.0),
        )
        idx = np.clip(base + offset, 0, n_in - 1).astype(int)
        np.add.at(weights, (np.arange(n_out), idx), w)
    return weights


def resize_grid(grid, new_size, method="bilinear"):
    """Interpolates a `(h, w, dim)` grid of embeddings to `new_size = (h', w')`.

    NumPy in, NumPy out; `method` is "bilinear" (the original's) or "bicubic" (timm's).
    """
    if method not in INTERPOLATIONS:
        raise ValueError(f"Unknown interpolation {method!r}; expected one of {INTERPOLATIONS}.")
    grid = np.asarray(grid, np.float32)
    (h, w), (nh, nw) = grid.shape[:2], new_size
    if (h, w) == (nh, nw):
        return grid
    if method == "bilinear":
        rows, cols = (ops.convert_to_numpy(_linear_matrix(i, o)) for i, o in ((h, nh), (w, nw)))
    else:
        rows, cols = _cubic_matrix(h, nh), _cubic_matrix(w, nw)
    out = np.einsum("ah,bw,hwd->abd", rows, cols, grid.astype(np.float64))
    return out.astype(np.float32)


def resize_position_embedding(posemb, new_grid, num_prefix_tokens=1, old_grid=None, method="bilinear"):
    """Resizes a `(1, prefix + h*w, dim)` position-embedding table to `new_grid`.

    The prefix (class-token) rows are kept as they are; the patch rows are interpolated in 2-D
    according to their place in the image (paper section 3.2).
    """
    posemb = np.asarray(posemb, np.float32)
    prefix, patches = posemb[:, :num_prefix_tokens], posemb[0, num_prefix_tokens:]
    h, w = grid_size_of(patches.shape[0], old_grid)
    grid = resize_grid(patches.reshape(h, w, -1), new_grid, method)
    return np.concatenate([prefix, grid.reshape(1, -1, grid.shape[-1])], axis=1)


@keras.saving.register_keras_serializable(package="keras_vit")
class PositionEmbedding(Float32Stream, keras.layers.Layer):
    """Adds learned position embeddings to `(batch, prefix + h*w, dim)` tokens.

    The table has `prefix + grid_size[0] * grid_size[1]` rows (row 0 for the class token).
    Called as `layer(tokens, patch_grid)`, where `patch_grid` is the `(batch, h, w, dim)`
    output of `PatchEmbedding`, used only for its shape: when `(h, w)` differs from
    `grid_size` the patch rows are bilinearly interpolated at run time, so one model serves
    any image size.
    """

    def __init__(self, grid_size, num_prefix_tokens=1, **kwargs):
        super().__init__(**kwargs)
        self.grid_size = tuple(int(s) for s in grid_size)
        self.num_prefix_tokens = int(num_prefix_tokens)

    def build(self, tokens_shape, patch_grid_shape=None):
        rows = self.num_prefix_tokens + self.grid_size[0] * self.grid_size[1]
        self.embeddings = self.add_weight(
            name="pos_embedding",
            shape=(1, rows, tokens_shape[-1]),
            initializer=keras.initializers.RandomNormal(stddev=0.02),
            autocast=False,
        )

    def _patch_table(self, h, w, dtype):
        prefix = self.embeddings[:, : self.num_prefix_tokens]
        table = self.embeddings[:, self.num_prefix_tokens :]
        if isinstance(h, int) and isinstance(w, int) and (h, w) == self.grid_size:
            return ops.cast(prefix, dtype), ops.cast(table, dtype)
        gh, gw = self.grid_size
        grid = ops.reshape(ops.cast(table, "float32"), (gh, gw, -1))
        rows, cols = _linear_matrix(gh, h), _linear_matrix(gw, w)
        grid = ops.einsum("ah,bw,hwd->abd", rows, cols, grid)
        return ops.cast(prefix, dtype), ops.cast(ops.reshape(grid, (1, -1, ops.shape(grid)[-1])), dtype)

    def call(self, tokens, patch_grid=None):
        if patch_grid is None:
            h, w = self.grid_size
        else:
            h, w = ops.shape(patch_grid)[1], ops.shape(patch_grid)[2]
        prefix, table = self._patch_table(h, w, tokens.dtype)
        return tokens + ops.concatenate([prefix, table], axis=1)

    def compute_output_shape(self, tokens_shape, patch_grid_shape=None):
        return tokens_shape

    def get_config(self):
        return {
            **super().get_config(),
            "grid_size": self.grid_size,
            "num_prefix_tokens": self.num_prefix_tokens,
        }
