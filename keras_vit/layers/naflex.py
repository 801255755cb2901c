"""NaFlex inputs (SigLIP 2): each image at its own aspect ratio, cut into patches, padded to
one patch budget. The model takes `patches` `(batch, max_patches, patch * patch * channels)`
(each patch's pixels row by row, channels last), `spatial_shapes` `(batch, 2)` (each image's
patch rows and columns, its patches in row-major order first) and `mask` `(batch, max_patches)`
(1 for a patch of the image, 0 for padding); `keras_vit.data.naflex_inputs` makes them from images."""

import keras
from keras import ops

from keras_vit.config.interpolation import INTERPOLATIONS
from keras_vit.layers.position_embedding import resize_kernel
from keras_vit.layers.residual import Float32Stream

# transformers' `Siglip2VisionEmbeddings.resize_positional_embeddings`:
# F.interpolate(mode="bilinear", align_corners=False, antialias=True), per image.
NAFLEX_INTERPOLATION = "bilinear_antialias"


@keras.saving.register_keras_serializable(package="keras_vit")
class NaFlexPatchEmbedding(keras.layers.Layer):
    """Projects flattened patches `(batch, n, patch * patch * channels)` to `hidden_dim`; the
    kernel has `PatchEmbedding`'s layout `(patch, patch, channels, hidden_dim)`, so one
    checkpoint loads either."""

    def __init__(self, patch_size, hidden_dim, channels=3, **kwargs):
        super().__init__(**kwargs)
        self.patch_size = int(patch_size)
        self.hidden_dim = int(hidden_dim)
        self.channels = int(channels)

    def build(self, input_shape):
        p, c = self.patch_size, self.channels
        if input_shape[-1] is not None and input_shape[-1] != p * p * c:
            raise ValueError(f"NaFlex patches have {input_shape[-1]} values; patch size {p} with {c} channels "
                             f"needs {p * p * c}.")
        self.kernel = self.add_weight(name="kernel", shape=(p, p, c, self.hidden_dim),
                                      initializer=keras.initializers.LecunNormal())
        self.bias = self.add_weight(name="bias", shape=(self.hidden_dim,), initializer="zeros")

    def call(self, patches, valid=None):
        """`valid` `(batch, n)`: the image's patches (nonzero); the others are replaced by zeros
        (selected, not multiplied: any value there, NaN too, changes nothing)."""
        kernel = ops.reshape(self.kernel, (-1, self.hidden_dim))
        patches = ops.cast(patches, kernel.dtype)
        if valid is not None:
            patches = ops.where(ops.expand_dims(ops.not_equal(valid, 0), -1), patches, ops.zeros_like(patches))
        return ops.matmul(patches, kernel) + self.bias

    def compute_output_shape(self, patches_shape, valid_shape=None):
        return (*patches_shape[:-1], self.hidden_dim)

    def get_config(self):
        return {**super().get_config(), "patch_size": self.patch_size, "hidden_dim": self.hidden_dim,
                "channels": self.channels}


def per_image_weights(grid, sizes, index, interpolation=NAFLEX_INTERPOLATION):
    """`(batch, n, grid)` weights resizing `grid` samples to each image's `sizes` `(batch, 1)`
    (float32), read at the output positions `index` `(batch, n)`: the half-pixel, normalised
    resize of `interpolation` (not corner-aligned, not clamped), as `resize_matrix`, per image."""
    spec = INTERPOLATIONS[interpolation]
    scale = grid / sizes
    width = ops.maximum(scale, 1.0) if spec.antialias else ops.ones_like(scale)
    centre = ops.expand_dims((index + 0.5) * scale, -1)
    source = ops.arange(grid, dtype="float32") + 0.5
    weights = resize_kernel(ops.abs(source - centre) / ops.expand_dims(width, -1), spec)
    return weights / ops.sum(weights, axis=-1, keepdims=True)


def finite_tokens(x):
    """`(x, bad)`: `x` `(batch, n, ...)` with each token holding a NaN or infinity replaced by
    zeros, and `bad` `(batch, n)` float32, 1.0 for those tokens. A sum over several images'
    tokens (packed rows) then takes the others' values by selection (0 x NaN is NaN); `poisoned`
    puts the NaN back where a token of one's own was bad."""
    axes = tuple(range(2, len(x.shape)))
    finite = ops.all(ops.isfinite(x), axis=axes) if axes else ops.isfinite(x)
    keep = ops.reshape(finite, (*ops.shape(finite), *([1] * len(axes))))
    return ops.where(keep, x, ops.zeros_like(x)), ops.cast(ops.logical_not(finite), "float32")


def poisoned(outputs, member, bad):
    """`outputs` `(batch, s, ...)` made NaN where the `(batch, s, n)` pairs `member` (bool or
    0 / 1) reach a `bad` token (`finite_tokens`), as the sum over them would be."""
    reach = ops.einsum("bsn,bn->bs", ops.cast(member, "float32"), bad) > 0
    reach = ops.reshape(reach, (*ops.shape(reach), *([1] * (len(outputs.shape) - 2))))
    return ops.where(reach, ops.cast(float("nan"), outputs.dtype), outputs)


def segment_membership(segment_ids, num_segments):
    """`(batch, num_segments, n)` bool: token `j` belongs to segment `s` (id `s + 1`)."""
    ids = ops.arange(1, num_segments + 1, dtype="int32")[None, :, None]
    return ops.equal(ops.cast(segment_ids, "int32")[:, None, :], ids)


def _packed_positions(sizes, segment_ids, position):
    """Each token's image rows, columns and place in its image `(batch, n)`, and 1.0 for a
    token of an image (0.0 padding, which reads position (0, 0) of a 1 x 1 image)."""
    member = ops.cast(segment_membership(segment_ids, ops.shape(sizes)[1]), "float32")  # (batch, images, n)
    counts = sizes[..., 0] * sizes[..., 1]
    starts = ops.cumsum(counts, axis=1) - counts

    def per_token(values):  # (batch, images) -> the value of each token's image (0 for padding)
        return ops.einsum("bs,bsn->bn", values, member)

    inside = ops.sum(member, axis=1)
    rows, cols = (per_token(sizes[..., k]) + (1.0 - inside) for k in (0, 1))
    return rows, cols, (position - per_token(starts)) * inside, inside


@keras.saving.register_keras_serializable(package="keras_vit")
class NaFlexPositionEmbedding(Float32Stream, keras.layers.Layer):
    """Adds to each image's patches the learned `grid_size` table resized to that image's
    `spatial_shapes` (transformers' `Siglip2VisionEmbeddings`: bilinear, antialiased, half-pixel),
    in float32; the padding positions get the resized table's first row, as there.

    `call(tokens, spatial_shapes, segment_ids=ids)`: several images packed in each sequence
    (`keras_vit.data.packing`): `spatial_shapes` `(batch, images, 2)` and each token's image
    `ids` `(batch, n)` (1 for the first image, 0 for padding), the images' patches one after
    the other in row-major order; each token gets the position of its own image."""

    interpolation = NAFLEX_INTERPOLATION
    num_prefix_tokens = 0

    def __init__(self, grid_size, **kwargs):
        super().__init__(**kwargs)
        self.grid_size = tuple(int(s) for s in grid_size)

    def build(self, tokens_shape, spatial_shapes_shape=None, segment_ids_shape=None):
        self.embeddings = self.add_weight(
            name="pos_embedding", shape=(1, self.grid_size[0] * self.grid_size[1], tokens_shape[-1]),
            initializer=keras.initializers.RandomNormal(stddev=0.02), autocast=False,
        )

    def call(self, tokens, spatial_shapes, segment_ids=None):
        n = ops.shape(tokens)[1]
        sizes = ops.cast(spatial_shapes, "float32")
        position = ops.arange(n, dtype="float32")[None, :]
        if segment_ids is None:
            rows_of, cols_of = sizes[:, 0:1], sizes[:, 1:2]
            inside = ops.cast(position < rows_of * cols_of, "float32")  # padding reads position (0, 0)
        else:
            rows_of, cols_of, position, inside = _packed_positions(sizes, segment_ids, position)
        row = ops.floor(position / cols_of)
        col = position - row * cols_of
        gh, gw = self.grid_size
        # an outer product by broadcasting: LiteRT runs no einsum of this form
        weights = ops.expand_dims(per_image_weights(gh, rows_of, row * inside), -1) * ops.expand_dims(
            per_image_weights(gw, cols_of, col * inside), -2)
        table = ops.cast(self.embeddings[0], "float32")
        resized = ops.matmul(ops.reshape(weights, (-1, n, gh * gw)), table)
        return ops.add(tokens, ops.cast(resized, tokens.dtype))

    def compute_output_shape(self, tokens_shape, spatial_shapes_shape=None, segment_ids_shape=None):
        return tokens_shape

    def get_config(self):
        return {**super().get_config(), "grid_size": self.grid_size}
