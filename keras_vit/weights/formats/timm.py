"""timm's `VisionTransformer` state dict (`.safetensors`, or a PyTorch `.pth` / `.bin`),
including the hybrid `vit_base_r50_s16_*` (its BiT ResNet under `patch_embed.backbone.`,
stages and blocks counted from 0) and `no_embed_class` position embeddings. Its checkpoints
run the exact GELU; they do not record the head count."""

import math

import numpy as np

from keras_vit.weights import containers
from keras_vit.weights.canonical import ATTN, QKV, Metadata
from keras_vit.weights.formats.base import Format
from keras_vit.weights.formats.common import torch_rows, with_class_row
from keras_vit.weights.table import Row, Table
from keras_vit.weights.transforms import (
    bias_to_heads,
    conv_from_canonical,
    conv_to_canonical,
    flat,
    heads_to_bias,
    heads_to_linear,
    join_rows,
    linear_to_heads,
    split_rows,
)


def fused_qkv_to_canonical(arrays, heads):
    weights, biases = split_rows(arrays[:1], heads), split_rows(arrays[1:], heads)
    return linear_to_heads(weights, heads) + bias_to_heads(biases, heads)


def fused_qkv_from_canonical(arrays, heads):
    weights, biases = heads_to_linear(arrays[:3], heads), heads_to_bias(arrays[3:], heads)
    return join_rows(weights, heads) + join_rows(biases, heads)


_BIT = "patch_embed.backbone."
_UNIT = _BIT + "stages.{s-1}.blocks.{u-1}."


def _bit_conv(canonical, theirs, optional=False):
    return Row(canonical + "kernel", theirs + "weight", conv_to_canonical, conv_from_canonical, optional)


def _bit_norm(canonical, theirs, optional=False):
    return Row((canonical + "scale", canonical + "bias"), (theirs + "weight", theirs + "bias"), None, flat, optional)


BIT_STEM = (
    _bit_conv("conv_root/", _BIT + "stem.conv.", optional=True),
    _bit_norm("gn_root/", _BIT + "stem.norm.", optional=True),
    _bit_conv("block{s}/unit{u}/conv{c}/", _UNIT + "conv{c}."),
    _bit_norm("block{s}/unit{u}/gn{c}/", _UNIT + "norm{c}."),
    _bit_conv("block{s}/unit{u}/conv_proj/", _UNIT + "downsample.conv."),
    _bit_norm("block{s}/unit{u}/gn_proj/", _UNIT + "downsample.norm."),
)

TABLE = Table(
    torch_rows(
        "patch_embed.proj.", "cls_token", "pos_embed", "blocks.{i}.norm1.", "blocks.{i}.norm2.",
        "blocks.{i}.attn.proj.", "blocks.{i}.mlp.fc1.", "blocks.{i}.mlp.fc2.", "norm.", "pre_logits.fc.", "head.",
    )
    + (
        Row(
            tuple(ATTN + f"{n}/kernel" for n in QKV) + tuple(ATTN + f"{n}/bias" for n in QKV),
            ("blocks.{i}.attn.qkv.weight", "blocks.{i}.attn.qkv.bias"),
            fused_qkv_to_canonical,
            fused_qkv_from_canonical,
        ),
    )
    + BIT_STEM
)


def detect(raw):
    keys = raw.tensors.keys()
    return "patch_embed.proj.weight" in keys or any(k.startswith("blocks.") for k in keys)


def prepare(raw):
    """Adds the class-token row to a `no_embed_class` position embedding."""
    tensors = dict(raw.tensors)
    posemb = tensors.get("pos_embed")
    if posemb is not None and "cls_token" in tensors and math.isqrt(posemb.shape[1]) ** 2 == posemb.shape[1]:
        tensors["pos_embed"] = with_class_row(posemb)
    return tensors


def write(path, ckpt):
    """A timm state dict as `.safetensors`; a pre_logits layer is written as `pre_logits.fc.*`,
    as older timm versions named it."""
    ckpt.require_class_token_head("timm")
    tensors = FORMAT.from_canonical(ckpt.tensors, ckpt.num_heads, f"export of {ckpt.path} to timm")
    containers.write_safetensors(path, {k: v.astype(np.float32) for k, v in tensors.items()}, {"format": "pt"})


FORMAT = Format(
    name="timm",
    table=TABLE,
    detect=detect,
    prepare=prepare,
    metadata=lambda raw, tensors: Metadata(approximate_gelu=False),
    write=write,
    suffixes=(".safetensors",),
)
