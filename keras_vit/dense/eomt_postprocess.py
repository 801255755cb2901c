"""EoMT's outputs to per-pixel class maps, as transformers' `EomtImageProcessor.post_process_semantic_segmentation`
does for whole images (no sliding window): NumPy, float32."""

import numbers

import numpy as np
from keras import ops

from keras_vit.dense.eomt import OUTPUTS


def _size(value, what):
    if (not isinstance(value, (tuple, list)) or len(value) != 2
            or not all(isinstance(s, numbers.Integral) and not isinstance(s, bool) and s >= 1 for s in value)):
        raise ValueError(f"{what}={value!r}: expected (height, width), two whole numbers >= 1.")
    return int(value[0]), int(value[1])


def _bilinear(n_in, n_out):
    """torch's `interpolate(mode="bilinear", align_corners=False)` along one axis: the `(n_out, n_in)`
    matrix, its sample positions in float32 as torch's (NumPy on the host: no compilation per size,
    as backend ops would have on JAX)."""
    scale = np.float32(n_in) / np.float32(n_out)
    source = np.maximum(scale * (np.arange(n_out, dtype=np.float32) + np.float32(0.5)) - np.float32(0.5), np.float32(0))
    low = np.minimum(np.floor(source).astype(np.int64), n_in - 1)
    high, frac, rows = np.minimum(low + 1, n_in - 1), (source - low).astype(np.float64), np.arange(n_out)
    matrix = np.zeros((n_out, n_in))
    np.add.at(matrix, (rows, low), 1 - frac)
    np.add.at(matrix, (rows, high), frac)
    return matrix


def resize_maps(maps, size):
    """`(..., h, w)` maps resized to `size` as torch's bilinear `interpolate` (float64 products)."""
    rows, cols = (_bilinear(n, m) for n, m in zip(maps.shape[-2:], size))
    return np.einsum("yh,...hw,xw->...yx", rows, maps.astype(np.float64), cols).astype(np.float32)


def _softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def semantic_scores(outputs, size=None):
    """The `(batch, classes, height, width)` class scores of an EoMT model's `outputs`: each query's
    class probabilities (softmax, "no object" left out) times its mask's (sigmoid), summed over the
    queries, the masks first resized to `size = (height, width)` (transformers' processor `size`:
    the model's input size; None: as they are)."""
    if not isinstance(outputs, dict) or not set(OUTPUTS) <= set(outputs):
        raise ValueError(f"outputs: expected the EoMT model's dict with {OUTPUTS}, got "
                         f"{sorted(outputs) if isinstance(outputs, dict) else type(outputs).__name__}.")
    classes, masks = (np.asarray(ops.convert_to_numpy(outputs[k]), np.float32) for k in OUTPUTS)
    if size is not None:
        masks = resize_maps(masks, _size(size, "size"))
    probs = _softmax(classes)[..., :-1]
    return np.einsum("bqc,bqhw->bchw", probs, 1 / (1 + np.exp(-masks)))


def post_process_semantic_segmentation(outputs, target_sizes, size=None):
    """One `(height, width)` int64 class map per image of an EoMT model's `outputs`: the
    `semantic_scores` (masks resized to `size`, the model's input size as transformers' processor
    `size`), each image's resized to its `target_sizes[i] = (height, width)` (bilinear), the best class
    per pixel."""
    scores = semantic_scores(outputs, size)
    if not isinstance(target_sizes, (list, tuple)) or len(target_sizes) != len(scores):
        raise ValueError(f"target_sizes: expected one (height, width) per image ({len(scores)}), got {target_sizes!r}.")
    return [np.argmax(resize_maps(s, _size(t, f"target_sizes[{i}]")), axis=0)
            for i, (s, t) in enumerate(zip(scores, target_sizes))]
