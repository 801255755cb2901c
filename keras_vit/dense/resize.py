"""Bilinear resizing of `(batch, h, w, channels)` maps as `torch.nn.functional.interpolate(mode="bilinear")`
does, with either `align_corners`: one `(out, in)` matrix per axis, built with Keras ops from possibly
traced sizes, so the same numbers come out on every backend and at any input size."""

from keras import ops


def _static(size):
    return isinstance(size, int)


def bilinear_matrix(n_in, n_out, align_corners):
    """The float32 `(n_out, n_in)` matrix of torch's bilinear resize along one axis."""
    dst, index = ops.arange(n_out, dtype="float32"), ops.arange(n_in, dtype="float32")
    # the sizes as tensors counted from the ranges: a traced size cast to a tensor would be fixed
    # to its traced value by torch.export
    size_in, size_out = ops.sum(ops.ones_like(index)), ops.sum(ops.ones_like(dst))
    if align_corners:
        src = dst * ((size_in - 1.0) / ops.maximum(size_out - 1.0, 1.0))
    else:  # half-pixel centres, sources before the first sample read it
        src = ops.maximum((dst + 0.5) * (size_in / size_out) - 0.5, 0.0)
    low = ops.minimum(ops.floor(src), size_in - 1.0)
    frac = ops.expand_dims(src - low, -1)
    high = ops.minimum(low + 1.0, size_in - 1.0)
    index = ops.expand_dims(index, 0)
    at = lambda i: ops.cast(ops.equal(index, ops.expand_dims(i, -1)), "float32")  # noqa: E731
    return at(low) * (1.0 - frac) + at(high) * frac


def resize(x, size, align_corners):
    """`x` `(batch, h, w, c)` resized to `size = (h', w')` (ints or traced sizes); unchanged
    where the sizes are known to be equal already."""
    h, w = ops.shape(x)[1], ops.shape(x)[2]
    if all(_static(s) for s in (h, w, *size)) and (h, w) == tuple(size):
        return x
    rows = ops.cast(bilinear_matrix(h, size[0], align_corners), x.dtype)
    cols = ops.cast(bilinear_matrix(w, size[1], align_corners), x.dtype)
    return ops.einsum("bw,nawc->nabc", cols, ops.einsum("ah,nhwc->nawc", rows, x))
