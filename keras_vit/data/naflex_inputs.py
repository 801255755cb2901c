"""Images of any shape to a NaFlex model's input (`naflex=True`, SigLIP 2): each image resized,
its aspect ratio kept, to the largest multiple of the patch size whose patch count fits
`max_num_patches`, scaled as the model's weights expect, cut into patches and padded to the
budget. The rule is transformers' `Siglip2ImageProcessor`'s (`get_image_size_for_max_num_patches`):
a bisection on the scale, each side rounded up to whole patches (at least one)."""

import math

import numpy as np

from keras_vit.preprocessing import preprocessing as preprocessing_of

# The bisection's interval and stopping width (transformers': eps=1e-5).
SCALE_RANGE = (1e-6, 100.0)
TOLERANCE = 1e-5


def check_seq_lens(seq_lens):
    """`seq_lens` as a sorted tuple of distinct whole numbers >= 1 (NaFlex patch budgets)."""
    if (isinstance(seq_lens, (str, bytes)) or not isinstance(seq_lens, (tuple, list)) or not seq_lens
            or any(isinstance(n, bool) or not isinstance(n, (int, float)) or not math.isfinite(n)
                   or n != int(n) or n < 1 for n in seq_lens)):
        raise ValueError(f"naflex_seq_lens={seq_lens!r} must be patch budgets, whole numbers >= 1 (e.g. 64,128,256).")
    return tuple(sorted({int(n) for n in seq_lens}))


def _side(size, scale, patch_size):
    return max(patch_size, math.ceil(size * scale / patch_size) * patch_size)


def budget_size(height, width, patch_size, max_num_patches):
    """`(height, width)` in pixels, multiples of `patch_size`, that an image of `height` x
    `width` is resized to for at most `max_num_patches` patches."""
    low, high = SCALE_RANGE
    while high - low >= TOLERANCE:
        scale = (low + high) / 2
        count = (_side(height, scale, patch_size) // patch_size) * (_side(width, scale, patch_size) // patch_size)
        low, high = (scale, high) if count <= max_num_patches else (low, scale)
    return _side(height, low, patch_size), _side(width, low, patch_size)


def patchify(image, patch_size):
    """`(rows * cols, patch * patch * channels)`: the patches of a `(height, width, channels)`
    image in row-major order, each patch's pixels row by row, channels last."""
    height, width, channels = image.shape
    rows, cols = height // patch_size, width // patch_size
    grid = image.reshape(rows, patch_size, cols, patch_size, channels).transpose(0, 2, 1, 3, 4)
    return grid.reshape(rows * cols, -1)


def _resize(image, size):
    import keras

    resized = keras.ops.image.resize(image.astype(np.float32), size, interpolation="bilinear", antialias=True)
    return keras.ops.convert_to_numpy(resized)


def naflex_inputs(images, model=None, max_num_patches=256, patch_size=None, preprocessing=None):
    """The `{"patches", "spatial_shapes", "mask"}` NumPy batch of a NaFlex model for `images`,
    a list of `(height, width, 3)` 0-255 RGB pixel arrays of any sizes: each resized (bilinear,
    antialiased) by `budget_size`, scaled by the model's preprocessing, patched and padded with
    zeros to `max_num_patches` (mask 0). `patch_size` / `preprocessing` default to the model's."""
    if model is not None:
        if not hasattr(model, "get_layer"):
            raise ValueError(f"naflex_inputs(images, model): model is a {type(model).__name__}, not a NaFlex model; "
                             "without a model give patch_size= (and max_num_patches=).")
        patch_size = patch_size or model.get_layer("embedding").patch_size
        preprocessing = preprocessing or model.preprocessing
    if not patch_size:
        raise ValueError("naflex_inputs needs a model or a patch_size.")
    if isinstance(max_num_patches, bool) or not isinstance(max_num_patches, int) or max_num_patches < 1:
        raise ValueError(f"max_num_patches={max_num_patches!r} must be a whole number >= 1.")
    scaling = preprocessing_of(preprocessing or "siglip2")
    offset, scale = np.float32(scaling.offset), np.float32(scaling.scale)
    batch = len(images)
    patches = np.zeros((batch, max_num_patches, patch_size * patch_size * 3), np.float32)
    shapes = np.zeros((batch, 2), np.int32)
    mask = np.zeros((batch, max_num_patches), np.int32)
    for i, image in enumerate(images):
        image = np.asarray(image)
        if image.ndim != 3 or image.shape[-1] != 3 or not image.shape[0] or not image.shape[1]:
            raise ValueError(f"Image {i} has shape {image.shape}; expected (height, width, 3) RGB pixels.")
        size = budget_size(image.shape[0], image.shape[1], patch_size, max_num_patches)
        pixels = _resize(image, size) if size != image.shape[:2] else image.astype(np.float32)
        own = patchify((pixels - offset) / scale, patch_size)
        patches[i, : len(own)], mask[i, : len(own)] = own, 1
        shapes[i] = (size[0] // patch_size, size[1] // patch_size)
    return {"patches": patches, "spatial_shapes": shapes, "mask": mask}
