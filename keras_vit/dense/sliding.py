"""Sliding-window inference of a dense model (mmseg's `slide` mode, DINOv2's segmentation evaluation).

The image, its shorter side resized to the window (the model's training size, the aspect kept),
is covered by square windows `stride` apart along each axis, the last flush with the far edge;
the model's output of each window (class logits or depth) is added where the window lies and the
sum divided by the number of windows that cover each pixel.
"""

import numpy as np


def window_starts(length, window, stride):
    """The first rows (columns) of the windows along an axis of `length` >= `window` pixels: every
    `stride`, the last moved back to end at `length` (as mmseg's `slide_inference`)."""
    if length < window:
        raise ValueError(f"A side of {length} pixels is shorter than the window {window}.")
    count = -(-(length - window) // stride) + 1
    return [min(i * stride, length - window) for i in range(count)]


def short_side_size(height, width, window):
    """`(height, width)` scaled so that the shorter side is `window` (the longer rounded)."""
    scale = window / min(height, width)
    return tuple(window if side == min(height, width) else max(window, int(round(side * scale)))
                 for side in (height, width))


def _padded(crops, most):
    """`crops` with the last repeated up to the next power of two (at most `most`): a few batch
    shapes for every image, so a compiled model is compiled a few times, not once per image size."""
    size = min(most, 1 << (len(crops) - 1).bit_length())
    return np.concatenate([crops, np.repeat(crops[-1:], size - len(crops), axis=0)]) if size > len(crops) else crops


def slide(predict, image, window, stride, batch_size=16):
    """The outputs `(H, W, ...)` of `predict` (a batch of `(window, window, 3)` crops -> their outputs
    `(n, window, window, ...)`) over the image `(H, W, 3)`, averaged where windows overlap."""
    height, width = image.shape[:2]
    corners = [(y, x) for y in window_starts(height, window, stride) for x in window_starts(width, window, stride)]
    total, count = None, np.zeros((height, width), np.float32)
    for first in range(0, len(corners), batch_size):
        batch = corners[first:first + batch_size]
        crops = _padded(np.stack([image[y:y + window, x:x + window] for y, x in batch]), batch_size)
        outputs = np.asarray(predict(crops), np.float32)[:len(batch)]
        if total is None:
            total = np.zeros((height, width, *outputs.shape[3:]), np.float32)
        for (y, x), output in zip(batch, outputs):
            total[y:y + window, x:x + window] += output
            count[y:y + window, x:x + window] += 1
    return total / count.reshape(count.shape + (1,) * (total.ndim - 2))
