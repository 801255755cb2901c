"""Learned 1-D position embeddings, resizable to another patch grid."""

import keras
import numpy as np
from keras import ops

from keras_vit.config.interpolation import DEFAULT, INTERPOLATIONS, check
from keras_vit.layers.residual import Float32Stream
from keras_vit.utils.patch_grid import grid_size_of


def _keys(x, a):
    """Keys' cubic convolution kernel at distances `x >= 0`."""
    near = ((a + 2) * x - (a + 3)) * x * x + 1
    far = ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
    return ops.where(x <= 1, near, ops.where(x < 2, far, 0.0))


def resize_kernel(x, spec):
    """The interpolation weight of distance `x` (in source pixels) under `spec`: cubic (Keys) or linear."""
    return _keys(x, spec.cubic_a) if spec.kernel == "cubic" else ops.maximum(1.0 - x, 0.0)


def _corner_aligned(n_in, index, last):
    """Corner-aligned linear weights (`scipy.ndimage.zoom(order=1)`)."""
    pos = index * ((n_in - 1) / ops.maximum(last, 1.0))
    lo = ops.minimum(ops.floor(pos), n_in - 1)
    frac = ops.expand_dims(pos - lo, -1)
    lo = ops.cast(lo, "int32")
    hi = ops.minimum(lo + 1, n_in - 1)
    return ops.one_hot(lo, n_in) * (1.0 - frac) + ops.one_hot(hi, n_in) * frac


def resize_matrix(n_in, n_out, name):
    """The float32 `(n_out, n_in)` matrix of the convention `name` (or an `Interpolation`)
    resizing `n_in` samples to `n_out` (an int, or a traced size): `resized = matrix @ samples`.

    Built with Keras ops from a possibly symbolic size, so that one definition resizes a
    checkpoint's table at load time and a model's at run time, exports to SavedModel / ONNX
    (elementwise ops, one-hot, matmul: no resize op) and gives the same numbers on every backend."""
    spec = INTERPOLATIONS[name] if isinstance(name, str) else name
    index = ops.arange(n_out, dtype="float32")
    last = ops.max(index)  # n_out - 1, also for a traced size
    if spec.align_corners:
        return _corner_aligned(n_in, index, last)
    scale = n_in / (last + 1.0)  # input samples per output sample
    width = ops.maximum(scale, 1.0) if spec.antialias else 1.0
    centre = ops.expand_dims((index + 0.5) * scale, -1)  # in input samples, half-pixel
    if spec.clamp:  # the two taps past each border, then folded onto the border sample
        taps = np.arange(-2, n_in + 2)
        weights = resize_kernel(ops.abs(ops.convert_to_tensor(taps + 0.5, "float32") - centre), spec)
        return ops.matmul(weights, ops.convert_to_tensor(np.eye(n_in, dtype=np.float32)[np.clip(taps, 0, n_in - 1)]))
    weights = resize_kernel(ops.abs(ops.arange(n_in, dtype="float32") + 0.5 - centre) / width, spec)
    return weights / ops.sum(weights, axis=-1, keepdims=True)


def resize_grid(grid, new_size, method=DEFAULT):
    """Interpolates a `(h, w, dim)` grid of embeddings to `new_size = (h', w')`.

    NumPy in, NumPy out; `method` names a convention of `keras_vit.config.interpolation`
    (e.g. "bilinear", the original's, or "bicubic_antialias", timm's).
    """
    check(method)
    grid = np.asarray(grid, np.float32)
    (h, w), (nh, nw) = grid.shape[:2], new_size
    if (h, w) == (nh, nw):
        return grid
    rows, cols = (ops.convert_to_numpy(resize_matrix(i, o, method)).astype(np.float64) for i, o in ((h, nh), (w, nw)))
    out = np.einsum("ah,bw,hwd->abd", rows, cols, grid.astype(np.float64))
    return out.astype(np.float32)


def resize_position_embedding(posemb, new_grid, num_prefix_tokens=1, old_grid=None, method=DEFAULT):
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
    `grid_size` the patch rows are interpolated at run time by `interpolation` (a name of
    `keras_vit.config.interpolation.INTERPOLATIONS`: its weights' library's resize), so one
    model serves any image size.
    """

    def __init__(self, grid_size, num_prefix_tokens=1, interpolation=DEFAULT, **kwargs):
        super().__init__(**kwargs)
        self.grid_size = tuple(int(s) for s in grid_size)
        self.num_prefix_tokens = int(num_prefix_tokens)
        self.interpolation = check(interpolation)

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
        rows, cols = resize_matrix(gh, h, self.interpolation), resize_matrix(gw, w, self.interpolation)
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
            "interpolation": self.interpolation,
        }
