"""FlexiViT's patch-size change: the patch-embedding kernel resized by the pseudo-inverse of a
resize operator (Beyer et al., 2023), so that a patch resized to the new size gives the token
the old patch gave: `<x, w> = <resize(x), w'>` for every patch `x`. The operator is the one
the checkpoint's library inverts (`Interpolation.patch_resize`): big_vision's
`resample_patchemb` the bilinear `tf.image.resize`, timm's `resample_patch_embed` the
antialiased bicubic `F.interpolate`."""

import numpy as np
from keras import ops

from keras_vit.config.interpolation import DEFAULT, INTERPOLATIONS
from keras_vit.layers.position_embedding import resize_matrix
from keras_vit.weights.lazy import LazyArray


def resize_patch_kernel(kernel, new_size, interpolation=DEFAULT):
    """An HWIO `(p, p, channels, width)` kernel -> `(new_size, new_size, channels, width)`,
    for weights whose library resizes as `interpolation` (a name of `INTERPOLATIONS`)."""
    spec = INTERPOLATIONS[interpolation]
    p = kernel.shape[0]
    one_d = ops.convert_to_numpy(resize_matrix(p, new_size, spec.patch_resize or spec)).astype(np.float64)
    resize = np.kron(one_d, one_d)  # row-major vec(A X A^T) = kron(A, A) vec(X)
    flat = np.asarray(kernel, np.float64).reshape(p * p, -1)
    return (np.linalg.pinv(resize.T) @ flat).reshape(new_size, new_size, *kernel.shape[2:]).astype(np.float32)


def resized_patch_kernel(kernel, new_size, interpolation=DEFAULT):
    """`resize_patch_kernel` of a `LazyArray`, done when loaded."""
    return LazyArray(
        (new_size, new_size, *kernel.shape[2:]), np.float32,
        lambda: resize_patch_kernel(kernel.load(), new_size, interpolation), kernel.source,
    )
