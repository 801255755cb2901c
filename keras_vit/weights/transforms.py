"""Transforms for key-table rows: functions `(arrays, heads) -> arrays` on lists of lazy
arrays, between canonical shapes (Flax: HWIO convolutions, `(in, out)` kernels, attention
kernels split per head) and the shapes other formats store."""

from keras_vit.weights.lazy import concat


def conv_to_canonical(arrays, heads):
    """PyTorch convolution `(out, in, kh, kw)` -> HWIO."""
    return [arrays[0].transpose(2, 3, 1, 0)]


def conv_from_canonical(arrays, heads):
    return [arrays[0].transpose(3, 2, 0, 1)]


def transpose(arrays, heads):
    """A Dense kernel `(in, out)` <-> PyTorch weight `(out, in)`, other arrays as they are."""
    return [arrays[0].transpose(1, 0), *arrays[1:]]


def flat(arrays, heads):
    """Norm parameters to 1-D (the 2020 hybrid files store GroupNorm's as `(1, 1, 1, C)`)."""
    return [a.reshape(a.shape[-1]) if len(a.shape) != 1 else a for a in arrays]


def heads_of(array, heads, what):
    if heads is None or array.shape[0] % heads:
        raise ValueError(f"{array.source}: cannot split width {array.shape[0]} of {what} into {heads} heads.")
    return heads


def linear_to_heads(arrays, heads):
    """PyTorch q/k/v weights `(D, D)` -> `(D, heads, D // heads)`."""
    return [a.transpose(1, 0).reshape(a.shape[1], heads_of(a, heads, "attention"), -1) for a in arrays]


def heads_to_linear(arrays, heads):
    return [a.reshape(a.shape[0], -1).transpose(1, 0) for a in arrays]


def bias_to_heads(arrays, heads):
    return [a.reshape(heads_of(a, heads, "attention"), -1) for a in arrays]


def heads_to_bias(arrays, heads):
    return [a.reshape(-1) for a in arrays]


def out_to_heads(arrays, heads):
    """PyTorch attention output weight `(D, D)` -> `(heads, D // heads, D)`."""
    a = arrays[0]
    return [a.transpose(1, 0).reshape(heads_of(a, heads, "attention"), -1, a.shape[0])]


def heads_to_out(arrays, heads):
    a = arrays[0]
    return [a.reshape(-1, a.shape[-1]).transpose(1, 0)]


def split_rows(arrays, heads, parts=3):
    """One fused `(3 D, ...)` array -> three `(D, ...)` arrays."""
    a = arrays[0]
    if a.shape[0] % parts:
        raise ValueError(f"{a.source}: fused q/k/v of shape {a.shape} does not split in {parts}.")
    n = a.shape[0] // parts
    return [a.rows(j * n, (j + 1) * n) for j in range(parts)]


def join_rows(arrays, heads):
    return [concat(arrays, axis=0)]


def linear_and_bias_to_heads(arrays, heads):
    """A PyTorch q/k/v projection `[weight (D, D), bias (D,)]` -> canonical per-head arrays."""
    return linear_to_heads(arrays[:1], heads) + bias_to_heads(arrays[1:], heads)


def heads_to_linear_and_bias(arrays, heads):
    return heads_to_linear(arrays[:1], heads) + heads_to_bias(arrays[1:], heads)
