"""timm's `VisionTransformer` state dict (`.safetensors`, or a PyTorch `.pth` / `.bin`),
including the hybrid `vit_base_r50_s16_*` (its BiT ResNet under `patch_embed.backbone.`,
stages and blocks counted from 0) and `no_embed_class` position embeddings (read, and written
for models with register tokens), and the CLIP image towers (`vit_*_clip_*`: `norm_pre`, no
patch-embedding bias, LayerNorm epsilon 1e-5; a `head` with an all-zero bias on `norm_pre` models
is CLIP's image projection, read as `projection_dim`, and written back so). Its checkpoints
run the exact GELU (the quick GELU of OpenAI CLIP is not in the file: pass `quick_gelu=True`, or
use a named entry, which records it); they do not record the head count."""

import math

import numpy as np

from keras_vit.weights import containers
from keras_vit.weights.canonical import (ATTN, DIST, LAYER_SCALE, MAP, MAP_ATTN, POSEMB, PRE_NORM, PROJECTION, QK_NORM, QKV,
                                         REG, Metadata)
from keras_vit.weights.formats.base import BLOCK_OPTIONS, CLIP_OPTIONS, Format
from keras_vit.weights.formats.common import linear_row, norm_rows, torch_rows, with_class_row
from keras_vit.weights.lazy import LazyArray
from keras_vit.weights.table import Row, Table, pairs
from keras_vit.weights.transforms import (
    bias_to_heads,
    conv_from_canonical,
    conv_to_canonical,
    flat,
    heads_to_bias,
    heads_to_linear,
    heads_to_linear_and_bias,
    heads_to_out,
    join_rows,
    linear_and_bias_to_heads,
    linear_to_heads,
    out_to_heads,
    split_rows,
    transpose,
)


def fused_qkv_to_canonical(arrays, heads):
    weights, biases = split_rows(arrays[:1], heads), split_rows(arrays[1:], heads)
    return linear_to_heads(weights, heads) + bias_to_heads(biases, heads)


def fused_qkv_from_canonical(arrays, heads):
    weights, biases = heads_to_linear(arrays[:3], heads), heads_to_bias(arrays[3:], heads)
    return join_rows(weights, heads) + join_rows(biases, heads)


def _fused_kernel_to_canonical(arrays, heads):
    return linear_to_heads(split_rows(arrays, heads), heads)


def _fused_kernel_from_canonical(arrays, heads):
    return join_rows(heads_to_linear(arrays, heads), heads)


def _fused_bias_to_canonical(arrays, heads):
    return bias_to_heads(split_rows(arrays, heads), heads)


def _fused_bias_from_canonical(arrays, heads):
    return join_rows(heads_to_bias(arrays, heads), heads)


def _fused_kv_to_canonical(arrays, heads):
    weights, biases = split_rows(arrays[:1], heads, parts=2), split_rows(arrays[1:], heads, parts=2)
    return linear_to_heads(weights, heads) + bias_to_heads(biases, heads)


def _fused_kv_from_canonical(arrays, heads):
    weights, biases = heads_to_linear(arrays[:2], heads), heads_to_bias(arrays[2:], heads)
    return join_rows(weights, heads) + join_rows(biases, heads)


# timm's `AttentionPoolLatent` (`global_pool="map"`): a latent query, fused key / value.
ATTENTION_POOL = (
    *pairs((MAP + "probe", "attn_pool.latent"), optional=True),
    Row((MAP_ATTN + "query/kernel", MAP_ATTN + "query/bias"), ("attn_pool.q.weight", "attn_pool.q.bias"),
        linear_and_bias_to_heads, heads_to_linear_and_bias, optional=True),
    Row(tuple(MAP_ATTN + f"{n}/{p}" for p in ("kernel", "bias") for n in ("key", "value")),
        ("attn_pool.kv.weight", "attn_pool.kv.bias"), _fused_kv_to_canonical, _fused_kv_from_canonical, optional=True),
    Row(MAP_ATTN + "out/kernel", "attn_pool.proj.weight", out_to_heads, heads_to_out, optional=True),
    *pairs((MAP_ATTN + "out/bias", "attn_pool.proj.bias"), optional=True),
    *pairs((MAP + "LayerNorm_0/scale", "attn_pool.norm.weight"), (MAP + "LayerNorm_0/bias", "attn_pool.norm.bias"),
           optional=True),
    linear_row(MAP + "MlpBlock_0/Dense_0/", "attn_pool.mlp.fc1.", optional=True),
    linear_row(MAP + "MlpBlock_0/Dense_1/", "attn_pool.mlp.fc2.", optional=True),
)

# The final LayerNorm: `norm` on the tokens, or `fc_norm` on the pooled features (timm's
# `fc_norm=True`, the default of its `global_pool="avg"` models), one of them.
FINAL_NORM = norm_rows("Transformer/encoder_norm/", "norm.", optional=True) + norm_rows("fc_norm/", "fc_norm.", optional=True)

# DeiT's distillation token and head, DINOv2's registers, LayerScale (DeiT III, DINOv2).
FAMILY_ROWS = (
    *pairs((DIST, "dist_token"), (REG, "reg_token"), (LAYER_SCALE[0], "blocks.{i}.ls1.gamma"),
           (LAYER_SCALE[1], "blocks.{i}.ls2.gamma"), optional=True),
    linear_row("head_dist/", "head_dist.", optional=True),
)

# CLIP's image projection, timm's `head` (an all-zero bias), under this name between `prepare` / `write` and the table.
CLIP_PROJECTION = "head.weight (CLIP projection)"
CLIP_EPSILON = 1e-5  # timm's CLIP towers: `norm_layer=nn.LayerNorm`

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
        "blocks.{i}.attn.proj.", "blocks.{i}.mlp.fc1.", "blocks.{i}.mlp.fc2.", None, "pre_logits.fc.", "head.",
    )
    + (
        Row(tuple(ATTN + f"{n}/kernel" for n in QKV), "blocks.{i}.attn.qkv.weight", _fused_kernel_to_canonical,
            _fused_kernel_from_canonical),
        Row(tuple(ATTN + f"{n}/bias" for n in QKV), "blocks.{i}.attn.qkv.bias", _fused_bias_to_canonical,
            _fused_bias_from_canonical, optional=True),
    )
    + norm_rows(QK_NORM[0], "blocks.{i}.attn.q_norm.", optional=True)
    + norm_rows(QK_NORM[1], "blocks.{i}.attn.k_norm.", optional=True)
    + BIT_STEM
    + ATTENTION_POOL
    + FAMILY_ROWS
    + FINAL_NORM
    + norm_rows(PRE_NORM, "norm_pre.", optional=True)
    + (Row(PROJECTION, CLIP_PROJECTION, transpose, transpose, optional=True),)
)


def detect(raw):
    keys = raw.tensors.keys()
    return "patch_embed.proj.weight" in keys or any(k.startswith("blocks.") for k in keys)


def is_clip_projection(tensors):
    """Whether a timm state dict's `head` is a CLIP tower's image projection: `norm_pre` models whose
    head has an all-zero bias (timm's conversion of OpenCLIP's `proj`), not a trained classifier."""
    bias = tensors.get("head.bias")
    return "norm_pre.weight" in tensors and "head.weight" in tensors and bias is not None and not np.any(bias.load())


def prepare(raw):
    """Adds the zero rows of the class (and distillation) token to a `no_embed_class` position
    embedding; names a CLIP tower's head its image projection."""
    tensors = dict(raw.tensors)
    if is_clip_projection(tensors):
        del tensors["head.bias"]
        tensors[CLIP_PROJECTION] = tensors.pop("head.weight")
    posemb = tensors.get("pos_embed")
    square = posemb is not None and len(posemb.shape) == 3 and math.isqrt(posemb.shape[1]) ** 2 == posemb.shape[1]
    if square and "cls_token" in tensors:  # another rank: refused by `Checkpoint.check`
        for _ in range(1 + ("dist_token" in tensors)):
            posemb = with_class_row(posemb)
        tensors["pos_embed"] = posemb
    return tensors


def without_embed_class(tensors, prefix):
    """timm's `no_embed_class` layout of canonical `tensors`: the position rows of the `prefix`
    tokens (class, distillation) added to those tokens, the position embedding left with the
    patch rows. The same model; the only layout in which timm's register tokens, like
    keras_vit's, get no position embedding."""
    tensors, posemb = dict(tensors), tensors[POSEMB]
    for row, key in enumerate(("cls", DIST)[:prefix]):
        token = tensors[key]
        tensors[key] = LazyArray(token.shape, np.float32,
                                 lambda t=token, r=row: t.load() + posemb.load()[:, r:r + 1], token.source)
    rows = (1, posemb.shape[1] - prefix, posemb.shape[2])
    tensors[POSEMB] = LazyArray(rows, np.float32, lambda: posemb.load()[:, prefix:], posemb.source)
    return tensors


def metadata(raw, tensors):
    """Exact GELU; timm's fc_norm models pool by the mean (`global_pool="avg"`, whose default it is);
    its CLIP towers (`norm_pre`) normalise with epsilon 1e-5, take CLIP's preprocessing and pool the class token."""
    clip = "norm_pre.weight" in tensors
    return Metadata(approximate_gelu=False, pooling="avg" if "fc_norm.weight" in tensors else "token" if clip else None,
                    layer_norm_epsilon=CLIP_EPSILON if clip else None, preprocessing="clip" if clip else None)


def write(path, ckpt):
    """A timm state dict as `.safetensors`; a pre_logits layer is written as `pre_logits.fc.*`,
    as older timm versions named it, a model with register tokens as `no_embed_class`, and CLIP's
    image projection as the `head` with an all-zero bias."""
    ckpt.require_class_token_head("timm")
    tensors = ckpt.tensors
    if ckpt.num_registers and POSEMB in tensors:
        tensors = without_embed_class(tensors, ckpt.position_prefix)
    tensors = FORMAT.from_canonical(tensors, ckpt.num_heads, f"export of {ckpt.path} to timm")
    if CLIP_PROJECTION in tensors:
        if "head.weight" in tensors:
            raise ValueError(f"{ckpt.path}: a timm model holds CLIP's image projection as its head; it cannot hold a "
                             "classifier on top of it (export the model with include_top=False).")
        tensors["head.weight"] = tensors.pop(CLIP_PROJECTION)
        tensors["head.bias"] = LazyArray.wrap(np.zeros(tensors["head.weight"].shape[0], np.float32), "CLIP projection")
    containers.write_safetensors(path, {k: v.astype(np.float32) for k, v in tensors.items()}, {"format": "pt"})


FORMAT = Format(
    name="timm",
    table=TABLE,
    detect=detect,
    prepare=prepare,
    metadata=metadata,
    write=write,
    suffixes=(".safetensors",),
    interpolation="bicubic_antialias",  # resample_abs_pos_embed, resample_patch_embed
    block_options=BLOCK_OPTIONS + CLIP_OPTIONS,
)
