"""Rows and clean-ups shared by several formats: the PyTorch layouts' common rows (timm and
Hugging Face differ only in names and in their q/k/v projections; `qkv_rows`: the separate
projections of the transformers families), and the zero class-token
row that position embeddings stored without one get, and the checks of a config's sizes."""

import numpy as np

from keras_vit.weights.canonical import ATTN, BLOCK, MLP, POSEMB, QKV
from keras_vit.weights.lazy import LazyArray, concat
from keras_vit.weights.table import Row, pairs
from keras_vit.weights.transforms import (bias_to_heads, conv_from_canonical, conv_to_canonical, heads_to_bias,
                                          heads_to_linear, heads_to_linear_and_bias, heads_to_out, linear_and_bias_to_heads,
                                          linear_to_heads, out_to_heads, transpose)


def norm_rows(canonical, theirs, weight="weight", bias="bias", optional=False):
    """A LayerNorm: canonical `scale`, `bias` <-> `theirs + weight`, `theirs + bias`; an RMSNorm
    has no bias."""
    return pairs((canonical + "scale", theirs + weight), optional=optional) + pairs(
        (canonical + "bias", theirs + bias), optional=True)


def linear_row(canonical, theirs, optional=False):
    """A Dense layer: kernel `(in, out)` <-> PyTorch weight `(out, in)`, bias as is."""
    return Row(
        (canonical + "kernel", canonical + "bias"), (theirs + "weight", theirs + "bias"), transpose, transpose, optional
    )


def bias_free_linear_rows(canonical, theirs):
    """A Dense layer whose bias may be absent (`qkv_bias`, `proj_bias`, `mlp_bias` False)."""
    return (Row(canonical + "kernel", theirs + "weight", transpose, transpose),
            *pairs((canonical + "bias", theirs + "bias"), optional=True))


def torch_rows(patch, cls, pos, ln1, ln2, out, fc1, fc2, norm, pre_logits, head):
    """The rows of a PyTorch ViT state dict except the q/k/v projections (biases and norm
    biases optional: the bias-free / RMSNorm models), from its names
    (`cls`, `pre_logits`, `head` None: a family without them; `norm` None: the format gives
    its final LayerNorm's rows itself)."""
    rows = (
        Row("embedding/kernel", patch + "weight", conv_to_canonical, conv_from_canonical),
        *pairs((POSEMB, pos)),
        *pairs(("embedding/bias", patch + "bias"), optional=True),  # none in CLIP
        *norm_rows(BLOCK + "LayerNorm_0/", ln1),
        Row(ATTN + "out/kernel", out + "weight", out_to_heads, heads_to_out),
        *pairs((ATTN + "out/bias", out + "bias"), optional=True),
        *norm_rows(BLOCK + "LayerNorm_2/", ln2),
        *bias_free_linear_rows(MLP + "Dense_0/", fc1),
        *bias_free_linear_rows(MLP + "Dense_1/", fc2),
        *(norm_rows("Transformer/encoder_norm/", norm) if norm else ()),
    )
    optional = (
        *(pairs(("cls", cls), optional=True) if cls else ()),
        *((linear_row("pre_logits/", pre_logits, optional=True),) if pre_logits else ()),
        *((linear_row("head/", head, optional=True),) if head else ()),
    )
    return rows + optional


def with_class_row(posemb):
    """A `(1, N, D)` position embedding with a zero class-token row put first."""
    zeros = np.zeros((1, 1, posemb.shape[-1]), posemb.dtype)
    return concat([LazyArray.wrap(zeros, "class-token row"), posemb], axis=1, source=posemb.source)


def config_pair(value, what, path, length=2):
    """A config's size `value` (a whole number, or a list of 2 to `length` of them: KerasHub's
    `image_shape` has 3) as a tuple of its first two, each >= 1; else a one-line ValueError."""
    values = [value] * 2 if isinstance(value, int) and not isinstance(value, bool) else value
    if (
        not isinstance(values, (list, tuple))
        or len(values) < 2
        or len(values) > length
        or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in values[:2])
    ):
        raise ValueError(f"{path}: its config's {what}={value!r}; expected a whole number >= 1 or a list of them.")
    return tuple(values[:2])


def qkv_rows(theirs, names=QKV, bias_free=False):
    """Separate q / k / v projections: `theirs` with `{n}` replaced by each of `names`;
    `bias_free`: their biases may be absent (`qkv_bias=False`)."""
    if bias_free:
        return tuple(row for n, t in zip(QKV, names) for row in (
            Row(ATTN + f"{n}/kernel", theirs.replace("{n}", t) + "weight", linear_to_heads, heads_to_linear),
            Row(ATTN + f"{n}/bias", theirs.replace("{n}", t) + "bias", bias_to_heads, heads_to_bias, optional=True)))
    return tuple(
        Row(
            (ATTN + f"{n}/kernel", ATTN + f"{n}/bias"),
            (theirs.replace("{n}", t) + "weight", theirs.replace("{n}", t) + "bias"),
            linear_and_bias_to_heads,
            heads_to_linear_and_bias,
        )
        for n, t in zip(QKV, names)
    )
