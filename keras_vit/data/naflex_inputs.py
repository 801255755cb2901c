"""Images of any shape to a NaFlex model's input (`naflex=True`, SigLIP 2): each image resized,
its aspect ratio kept, to the largest multiple of the patch size whose patch count fits
`max_num_patches`, scaled as the model's weights expect, cut into patches and padded to the
budget. The rule is transformers' `Siglip2ImageProcessor`'s (`get_image_size_for_max_num_patches`):
a bisection on the scale, each side rounded up to whole patches (at least one)."""

import math
import numbers

import numpy as np

from keras_vit.utils.limits import MAX_DIMENSION
from keras_vit.preprocessing import preprocessing as preprocessing_of

# The bisection's interval and stopping width (transformers': eps=1e-5).
SCALE_RANGE = (1e-6, 100.0)
TOLERANCE = 1e-5


BATCH_KEYS = ("patches", "spatial_shapes", "mask")  # a NaFlex model's inputs


def check_count(name, value, high=MAX_DIMENSION):
    """`value` as an int if it is a whole number (NumPy's too, not a bool) in [1, `high`]
    (a patch budget is bounded by `keras_vit.utils.limits`' token bound), else a one-line ValueError."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral) or not 1 <= value <= high:
        raise ValueError(f"{name}={value!r} must be a whole number in [1, {high}].")
    return int(value)


def check_seq_lens(seq_lens):
    """`seq_lens` as a sorted tuple of distinct whole numbers in [1, MAX_DIMENSION] (NaFlex
    patch budgets, bounded as every token count)."""
    if (isinstance(seq_lens, (str, bytes)) or not isinstance(seq_lens, (tuple, list)) or not seq_lens
            or any(isinstance(n, (bool, np.bool_)) or not isinstance(n, numbers.Real) or not math.isfinite(n)
                   or n != int(n) or not 1 <= n <= MAX_DIMENSION for n in seq_lens)):
        raise ValueError(f"naflex_seq_lens={seq_lens!r} must be patch budgets, whole numbers in [1, {MAX_DIMENSION}] "
                         "(e.g. 64,128,256).")
    return tuple(sorted({int(n) for n in seq_lens}))


def check_batch(inputs):
    """The `(patches, spatial_shapes, mask)` NumPy arrays of a NaFlex batch `inputs` (a dict of
    `BATCH_KEYS`), or a one-line ValueError: a key missing, shapes that do not fit together,
    a spatial shape not of whole numbers >= 1, or a mask that is not each image's rows x columns
    patches first (ones) and then padding (zeros)."""
    if not isinstance(inputs, dict) or any(key not in inputs for key in BATCH_KEYS):
        given = sorted(inputs) if isinstance(inputs, dict) else type(inputs).__name__
        raise ValueError(f"A NaFlex batch is a dict of {', '.join(BATCH_KEYS)} (keras_vit.naflex_inputs); got {given}.")
    patches, shapes, mask = (np.asarray(inputs[key]) for key in BATCH_KEYS)
    if patches.ndim != 3 or not len(patches) or shapes.shape != (len(patches), 2) or mask.shape != patches.shape[:2]:
        raise ValueError(f"NaFlex batch shapes patches {patches.shape}, spatial_shapes {shapes.shape}, mask {mask.shape}; "
                         "expected (batch >= 1, n, values), (batch, 2) and (batch, n).")
    if shapes.dtype.kind not in "iu" or mask.dtype.kind not in "iub":
        raise ValueError(f"NaFlex spatial_shapes ({shapes.dtype}) and mask ({mask.dtype}) must hold whole numbers.")
    counts = shapes.astype(np.int64).prod(axis=1)
    if (shapes < 1).any() or (counts > patches.shape[1]).any():
        raise ValueError(f"NaFlex spatial_shapes {shapes.tolist()[:4]} must be (rows, columns) >= 1 whose patches fit "
                         f"the {patches.shape[1]} places of each row.")
    expected = np.arange(patches.shape[1])[None, :] < counts[:, None]
    if not np.array_equal(mask != 0, expected) or ((mask != 0) & (mask != 1)).any():
        image = int(np.argmax((mask != 0).sum(axis=1) != counts)) if not np.array_equal((mask != 0).sum(1), counts) else 0
        raise ValueError(f"NaFlex mask of image {image} does not mark its rows x columns = {int(counts[image])} patches "
                         "first (1) and then padding (0), as spatial_shapes says.")
    return patches, shapes, mask


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
        patch_size = model.get_layer("embedding").patch_size if patch_size is None else patch_size
        preprocessing = preprocessing or model.preprocessing
    if patch_size is None:
        raise ValueError("naflex_inputs needs a model or a patch_size.")
    patch_size = check_count("patch_size", patch_size)
    max_num_patches = check_count("max_num_patches", max_num_patches)
    if isinstance(images, (str, bytes)) or not hasattr(images, "__len__") or not len(images):
        raise ValueError("naflex_inputs needs a non-empty list of (height, width, 3) images.")
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
