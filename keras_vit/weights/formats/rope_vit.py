"""Naver's RoPE-ViT (Heo et al., 2024) as timm state dicts: `vit_*_patch16_rope_224` (the axial
form, period 100) and `vit_*_patch16_rope_mixed_224` (RoPE-Mixed: the learned frequencies
`rope.freqs`, `(2, depth, heads, head_dim / 2)`), timm's `Eva` layout with `attn_type='rope'`
(key lists from timm's `eva.py`: a fused `qkv` with bias, `gamma_1` / `gamma_2` LayerScale, a GELU
`Mlp`, the final `norm`, the class token unrotated, no position table). Renamed to timm's
`VisionTransformer` names and read through its table (less the position table, as DINOv3's).
The `_ape` variants (`vit_*_patch16_rope[_mixed]_ape_224`) add a learned table of the patches only
(`no_embed_class`), read with a zero class-token row (`rope_absolute=True`). `format="timm_eva"`
writes this layout (`formats.eva`)."""

import re

from keras_vit.weights.canonical import POSEMB, ROPE_FREQS, Metadata
from keras_vit.weights.formats import dinov3, timm
from keras_vit.weights.formats.base import BLOCK_OPTIONS, Format
from keras_vit.weights.table import Row, Table, pairs

# timm's `vit_*_patch16_rope*` defaults: the periods of the axial form and of the mixed form's
# initial frequencies (`rope_temperature`), LayerNorm epsilon (timm's `LayerNorm`).
AXIAL_THETA, MIXED_THETA, EPSILON = 100.0, 10.0, 1e-6
FREQS = "rope.freqs"
_BLOCK_FREQS = "blocks.{i}.attn.rope_freqs"  # one block's `(2, heads, head_dim / 2)`, split off `rope.freqs`


def detect(raw):
    keys = raw.tensors.keys()
    return ("patch_embed.proj.weight" in keys and "cls_token" in keys and "blocks.0.gamma_1" in keys
            and not {"reg_token", "storage_tokens"} & set(keys))


def prepare(raw):
    """timm `VisionTransformer` names, `rope.freqs` split into its blocks', the `_ape` table given its
    class-token row (zero: the same model)."""
    tensors = {}
    for key, value in timm.prepare(raw).items():  # an `_ape` table of the patches only: a zero class-token row first
        if key == FREQS:
            if len(value.shape) != 4 or value.shape[0] != 2:
                raise ValueError(f"{raw.path}: {FREQS} has shape {value.shape}; "
                                 "expected (2, depth, heads, head_dim / 2).")
            by_block = value.transpose(1, 0, 2, 3)
            tensors.update({_BLOCK_FREQS.format(i=i): by_block[i] for i in range(value.shape[1])})
        else:
            tensors[re.sub(r"\.gamma_(\d)$", r".ls\1.gamma", key)] = value
    return tensors


def metadata(raw, tensors):
    mixed = FREQS in raw.tensors
    return Metadata(approximate_gelu=False, layer_norm_epsilon=EPSILON, preprocessing="deit",
                    rope_theta=MIXED_THETA if mixed else AXIAL_THETA, rope_form="mixed" if mixed else "axial")


FORMAT = Format(
    name="rope_vit_torch",
    table=Table(dinov3.FORMAT.table.rows + (Row(ROPE_FREQS, _BLOCK_FREQS, optional=True),)
                + pairs((POSEMB, "pos_embed"), optional=True)),
    detect=detect,
    prepare=prepare,
    metadata=metadata,
    block_options=BLOCK_OPTIONS,
    interpolation="bicubic_antialias",  # the `_ape` tables: timm's resample_abs_pos_embed
)
