"""FlexiViT's patch-size change: the patch-embedding kernel resized by the pseudo-inverse of
the bilinear resize operator (Beyer et al., 2023), so that a patch resized to the new size
gives the token the old patch gave: `<x, w> = <resize(x), w'>` for every patch `x`."""

import numpy as np

from keras_vit.weights.lazy import LazyArray


def bilinear_matrix(n_in, n_out):
    """`(n_out, n_in)` weights of half-pixel bilinear resizing with clamped borders
    (`tf.image.resize(method="bilinear")`, which big_vision's FlexiViT uses)."""
    src = np.clip((np.arange(n_out) + 0.5) * n_in / n_out - 0.5, 0, n_in - 1)
    lo = np.floor(src).astype(int)
    hi = np.minimum(lo + 1, n_in - 1)
    matrix = np.zeros((n_out, n_in))
    np.add.at(matrix, (np.arange(n_out), lo), 1 - (src - lo))
    np.add.at(matrix, (np.arange(n_out), hi), src - lo)
    return matrix


def resize_patch_kernel(kernel, new_size):
    """An HWIO `(p, p, channels, width)` kernel -> `(new_size, new_size, channels, width)`."""
    p = kernel.shape[0]
    one_d = bilinear_matrix(p, new_size)
    resize = np.kron(one_d, one_d)  # row-major vec(A X A^T) = kron(A, A) vec(X)
    flat = np.asarray(kernel, np.float64).reshape(p * p, -1)
    return (np.linalg.pinv(resize.T) @ flat).reshape(new_size, new_size, *kernel.shape[2:]).astype(np.float32)


def resized_patch_kernel(kernel, new_size):
    """`resize_patch_kernel` of a `LazyArray`, done when loaded."""
    return LazyArray(
        (new_size, new_size, *kernel.shape[2:]), np.float32, lambda: resize_patch_kernel(kernel.load(), new_size),
        kernel.source,
    )
