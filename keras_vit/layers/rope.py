"""Rotary position embeddings in DINOv3's 2-D form (Simeoni et al., 2025; transformers'
`DINOv3ViTRopePositionEmbedding`): each patch's centre, normalised per axis to [-1, 1], rotates
the pairs `(i, i + head_dim / 2)` of its query and key by `2 pi * coordinate * period ** -f`,
the first quarter of the frequencies along y, the second along x. Prefix tokens are not rotated."""

import math

import keras
import numpy as np
from keras import ops

THETA = 100.0


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


def rotate(x, cos, sin):
    """`x` of `(batch, prefix + patches, heads, head_dim)` with its last `patches` tokens rotated
    (in float32, returned in `x`'s dtype)."""
    patches = ops.shape(cos)[0]
    prefix = ops.shape(x)[1] - patches
    head, tail = x[:, :prefix], ops.cast(x[:, prefix:], "float32")
    half = ops.shape(x)[-1] // 2
    rotated = ops.concatenate([-tail[..., half:], tail[..., :half]], axis=-1)
    tail = tail * cos[None, :, None] + rotated * sin[None, :, None]
    return ops.concatenate([head, ops.cast(tail, x.dtype)], axis=1)


@keras.saving.register_keras_serializable(package="keras_vit")
class RopePositionEmbedding(keras.layers.Layer):
    """The patch coordinates attention rotates by (`position_embedding="rope"`): called as
    `layer(tokens, patch_grid)` like `PositionEmbedding`, it returns `(1, rows * columns, 2)`
    float32 `(y, x)` centres in [-1, 1] of the run-time grid, which `Encoder` passes to every
    block's attention; no variables, any grid. `grid_size` is the default grid.

    While training, `shift` adds one uniform draw in `[-shift, shift]` per axis, `jitter`
    multiplies each axis by a log-uniform draw in `[1 / jitter, jitter]` and `rescale` both
    axes by one in `[1 / rescale, rescale]` (DINOv3's augmentation; None: off)."""

    def __init__(self, grid_size, num_prefix_tokens=0, shift=None, jitter=None, rescale=None, seed=None, **kwargs):
        super().__init__(**{"dtype": "float32", **kwargs})
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
        coordinates = patch_coordinates(h, w)
        if training:
            coordinates = self._augmented(coordinates)
        return coordinates[None]

    def compute_output_shape(self, tokens_shape, patch_grid_shape=None):
        rows, columns = self.grid_size if patch_grid_shape is None else patch_grid_shape[1:3]
        return (1, None if rows is None or columns is None else rows * columns, 2)

    def get_config(self):
        return {**super().get_config(), "grid_size": self.grid_size, "num_prefix_tokens": self.num_prefix_tokens,
                "shift": self.shift, "jitter": self.jitter, "rescale": self.rescale, "seed": self.seed}
