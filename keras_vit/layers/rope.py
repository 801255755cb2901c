"""Rotary position embeddings of the patch tokens' queries and keys, in three 2-D forms
(`FORMS`); prefix tokens are not rotated, the rotations are computed in float32.

- "dinov3" (Simeoni et al., 2025; transformers' `DINOv3ViTRopePositionEmbedding`): each patch's
  centre, normalised per axis to [-1, 1], rotates the pairs `(i, i + head_dim / 2)` by
  `2 pi * coordinate * period ** -f`, the first quarter of the frequencies along y, the second along x.
- "axial" (Naver's RoPE-ViT, Heo et al. 2024; timm `RotaryEmbeddingCat(in_pixels=False)` with
  `grid_indexing='xy'`): the patch's integer (column, row) index rotates the adjacent pairs
  `(2i, 2i + 1)` by `index * period ** (-j / (head_dim / 4))`, the first half of the pairs along x,
  the second along y; at another grid the indices can be scaled to a reference grid (timm's
  `ref_feat_shape`, EVA-02).
- "mixed" (RoPE-Mixed, timm `RotaryEmbeddingMixed`): the adjacent pair `j` of head `h` is rotated
  by `column * fx[h, j] + row * fy[h, j]`, the frequencies learned per block and head (the
  attention's `rope_frequencies`, initialised as timm's `init_random_2d_freqs` with the period).
"""

import math

import keras
import numpy as np
from keras import ops

from keras_vit.config.vit_config import ROPE_FORMS as FORMS
from keras_vit.config.vit_config import ROPE_INDEXINGS as INDEXINGS
from keras_vit.config.vit_config import ROPE_THETA as THETA


def patch_coordinates(h, w):
    """`(h * w, 2)` float32 `(y, x)` centres of a row-major `h` x `w` grid in [-1, 1]. Symbolic sizes work."""
    y = (ops.arange(h, dtype="float32") + 0.5) / ops.cast(h, "float32")
    x = (ops.arange(w, dtype="float32") + 0.5) / ops.cast(w, "float32")
    y, x = ops.repeat(y, w), ops.tile(x, [h])
    return 2.0 * ops.stack([y, x], axis=1) - 1.0


def rotation(coordinates, head_dim, theta=THETA):
    """`(cos, sin)`, each `(patches, head_dim)` float32, of `(patches, 2)` coordinates."""
    if head_dim % 4:
        raise ValueError(f"rope position embeddings need a head size divisible by 4, got {head_dim}.")
    frequencies = ops.convert_to_tensor(theta ** -np.arange(0.0, 1.0, 4.0 / head_dim, dtype=np.float32))
    angles = 2.0 * math.pi * ops.cast(coordinates, "float32")[:, :, None] * frequencies[None, None]
    angles = ops.reshape(angles, (-1, head_dim // 2))
    angles = ops.concatenate([angles, angles], axis=-1)
    return ops.cos(angles), ops.sin(angles)


def grid_indices(h, w, reference=None, offset=0.0):
    """`(h * w, 2)` float32 `(row, column)` indices of a row-major `h` x `w` grid, starting at
    `offset` (timm's `grid_offset`), scaled by `reference / (h, w)` per axis where a reference grid
    `(rows, columns)` is given (timm's `ref_feat_shape`). Symbolic sizes work."""
    y, x = ops.arange(h, dtype="float32") + offset, ops.arange(w, dtype="float32") + offset
    if reference is not None:
        y = y * (float(reference[0]) / ops.cast(h, "float32"))
        x = x * (float(reference[1]) / ops.cast(w, "float32"))
    return ops.stack([ops.repeat(y, w), ops.tile(x, [h])], axis=1)


def axial_rotation(indices, head_dim, theta):
    """`(cos, sin)`, each `(patches, head_dim)` float32, of the axial form for `(patches, 2)`
    `(row, column)` indices: pairs `(2i, 2i + 1)`, the first half along the column, the second
    along the row."""
    if head_dim % 4:
        raise ValueError(f"rope position embeddings need a head size divisible by 4, got {head_dim}.")
    bands = ops.convert_to_tensor(theta ** -(np.arange(head_dim // 4, dtype=np.float32) / (head_dim // 4)))
    indices = ops.cast(indices, "float32")
    angles = ops.concatenate([indices[:, 1:2] * bands[None], indices[:, 0:1] * bands[None]], axis=-1)
    angles = ops.repeat(angles, 2, axis=-1)
    return ops.cos(angles), ops.sin(angles)


def mixed_rotation(indices, frequencies):
    """`(cos, sin)`, each `(patches, heads, head_dim)` float32, of the mixed form for `(patches, 2)`
    `(row, column)` indices and the `(2, heads, head_dim / 2)` frequencies `(fx, fy)`: pairs `(2i, 2i + 1)`."""
    indices, frequencies = ops.cast(indices, "float32"), ops.cast(frequencies, "float32")
    angles = indices[:, 1, None, None] * frequencies[0][None] + indices[:, 0, None, None] * frequencies[1][None]
    angles = ops.repeat(angles, 2, axis=-1)
    return ops.cos(angles), ops.sin(angles)


def mixed_frequencies(heads, head_dim, theta, seed=None):
    """timm's `init_random_2d_freqs` for one block: `(2, heads, head_dim / 2)` float32 `(fx, fy)`,
    magnitudes `theta ** (-4j / head_dim)`, each head's pairs turned by a random angle."""
    if head_dim % 4:
        raise ValueError(f"rope position embeddings need a head size divisible by 4, got {head_dim}.")
    magnitude = ops.convert_to_tensor(theta ** -(np.arange(0, head_dim, 4, dtype=np.float32) / head_dim))[None]
    angle = keras.random.uniform((heads, 1), 0.0, 2.0 * math.pi, seed=seed)
    fx = ops.concatenate([magnitude * ops.cos(angle), magnitude * ops.cos(angle + math.pi / 2)], axis=-1)
    fy = ops.concatenate([magnitude * ops.sin(angle), magnitude * ops.sin(angle + math.pi / 2)], axis=-1)
    return ops.stack([fx, fy])


def rotate(x, cos, sin, interleaved=False):
    """`x` of `(batch, prefix + patches, heads, head_dim)` with its last `patches` tokens rotated
    (in float32, returned in `x`'s dtype) by `(patches, head_dim)` or per head `(patches, heads,
    head_dim)` angles: the pairs `(i, i + head_dim / 2)` (DINOv3, timm's `rope_rotate_half`) or,
    `interleaved`, `(2i, 2i + 1)` (timm's `rot`)."""
    patches = ops.shape(cos)[0]
    prefix = ops.shape(x)[1] - patches
    head, tail = x[:, :prefix], ops.cast(x[:, prefix:], "float32")
    if interleaved:  # [-x1, x0, -x3, x2, ...]
        size = x.shape[-1]
        swapped = ops.convert_to_tensor(np.arange(size).reshape(-1, 2)[:, ::-1].reshape(-1).astype(np.int32))
        signs = ops.convert_to_tensor(np.tile(np.float32([-1.0, 1.0]), size // 2))
        rotated = ops.take(tail, swapped, axis=-1) * signs
    else:
        half = ops.shape(x)[-1] // 2
        rotated = ops.concatenate([-tail[..., half:], tail[..., :half]], axis=-1)
    if len(cos.shape) == 2:
        cos, sin = cos[:, None], sin[:, None]
    tail = tail * cos[None] + rotated * sin[None]
    return ops.concatenate([head, ops.cast(tail, x.dtype)], axis=1)


@keras.saving.register_keras_serializable(package="keras_vit")
class RopePositionEmbedding(keras.layers.Layer):
    """The patch coordinates attention rotates by (`position_embedding="rope"`): called as
    `layer(tokens, patch_grid)` like `PositionEmbedding`, it returns `(1, rows * columns, 2)`
    float32 `(y, x)` coordinates of the run-time grid, which `Encoder` passes to every block's
    attention; no variables, any grid. `grid_size` is the default grid. `form` "dinov3": the
    patch centres in [-1, 1]; "axial" / "mixed": the integer (row, column) indices, the axial
    form's scaled to `reference_grid` where given (`grid_indices`) and, `indexing="ij"` (EVA-02),
    given as (column, row), so that the first half of the pairs turns along the rows; the axial
    indices start at `index_offset` (Perception Encoder's 1).

    While training, `shift` adds one uniform draw in `[-shift, shift]` per axis, `jitter`
    multiplies each axis by a log-uniform draw in `[1 / jitter, jitter]` and `rescale` both
    axes by one in `[1 / rescale, rescale]` (DINOv3's augmentation; None: off)."""

    def __init__(self, grid_size, num_prefix_tokens=0, shift=None, jitter=None, rescale=None, seed=None,
                 form="dinov3", reference_grid=None, indexing="xy", index_offset=0.0, **kwargs):
        super().__init__(**{"dtype": "float32", **kwargs})
        if form not in FORMS:
            raise ValueError(f"Unknown rope form {form!r}; expected one of {FORMS}.")
        self.form = form
        if indexing not in INDEXINGS:
            raise ValueError(f"Unknown rope indexing {indexing!r}; expected one of {INDEXINGS}.")
        self.indexing = indexing
        self.index_offset = float(index_offset)
        self.reference_grid = None if reference_grid is None else tuple(int(s) for s in reference_grid)
        self.grid_size = tuple(int(s) for s in grid_size)
        self.num_prefix_tokens = int(num_prefix_tokens)
        self.shift, self.jitter, self.rescale = shift, jitter, rescale
        self.seed = seed
        self.seed_generator = keras.random.SeedGenerator(seed)

    def build(self, tokens_shape, patch_grid_shape=None):
        pass

    def _augmented(self, coordinates):
        def draw(shape, bound):
            return keras.random.uniform(shape, -bound, bound, seed=self.seed_generator)

        if self.shift:
            coordinates = coordinates + draw((1, 2), self.shift)
        if self.jitter:
            coordinates = coordinates * ops.exp(draw((1, 2), math.log(self.jitter)))
        if self.rescale:
            coordinates = coordinates * ops.exp(draw((1, 1), math.log(self.rescale)))
        return coordinates

    def call(self, tokens, patch_grid=None, training=None):
        h, w = self.grid_size if patch_grid is None else (ops.shape(patch_grid)[1], ops.shape(patch_grid)[2])
        if self.form == "dinov3":
            coordinates = patch_coordinates(h, w)
        else:
            axial = self.form == "axial"
            coordinates = grid_indices(h, w, self.reference_grid if axial else None, self.index_offset if axial else 0.0)
            if self.indexing == "ij":
                coordinates = ops.flip(coordinates, axis=1)
        if training:
            coordinates = self._augmented(coordinates)
        return coordinates[None]

    def compute_output_shape(self, tokens_shape, patch_grid_shape=None):
        rows, columns = self.grid_size if patch_grid_shape is None else patch_grid_shape[1:3]
        return (1, None if rows is None or columns is None else rows * columns, 2)

    def get_config(self):
        return {**super().get_config(), "grid_size": self.grid_size, "num_prefix_tokens": self.num_prefix_tokens,
                "shift": self.shift, "jitter": self.jitter, "rescale": self.rescale, "seed": self.seed,
                "form": self.form, "reference_grid": self.reference_grid, "indexing": self.indexing,
                "index_offset": self.index_offset}
