"""Meta's Perception Encoder core image towers (PE-core; Bolya et al., 2025; Apache-2.0) in timm's layout
(`vit_pe_core_{tiny,small}_patch16_384`, `vit_pe_core_base_patch16_224`, `vit_pe_core_large_patch14_336`;
timm `eva.py`: `Eva` with `attn_type='rope'`): a timm file, or OpenCLIP's `PE-Core-*` file with the tower
under `visual.trunk.` (its text tower, under `text.`, is `keras_vit.text.open_clip`'s). Read only.

Keys, timm's ViT names: `patch_embed.proj.weight` (no bias), `cls_token`, `pos_embed` (the class token's
row first), `norm_pre`, `blocks.{i}.` `norm1`, `attn.qkv` (with its bias), `attn.proj`, `norm2`, `mlp.fc1` /
`fc2`, the final `norm`, the attention pool `attn_pool.` (`latent`, `q`, `kv`, `proj`, `norm`, `mlp`) and the
image projection as `head` with an all-zero bias (`projection_dim`). What the file does not hold comes from
timm's definitions: LayerNorm epsilon 1e-5, exact GELU, the learned table beside the axial rotation ('xy',
period 10000) of the patch indices starting at 1 (`rope_offset`; 0 without a class token, as PE-core G's)
scaled to the table's grid, the class token unrotated, 8 heads in the attention pool (`map_heads`), and
mean / std 0.5 with bicubic resizing. PE-core G/14 (its pool's MLP narrower than the blocks') is refused by
the shape check; so are the PE-lang / PE-spatial towers (LayerScale, no pool)."""

import dataclasses
import math

from keras_vit.weights.canonical import Metadata
from keras_vit.weights.formats import eva, timm
from keras_vit.weights.formats.base import Format

THETA, EPSILON, POOL_HEADS = 10000.0, 1e-5, 8  # timm's `vit_pe_core_*`: rope_temperature, LayerNorm, attn_pool_num_heads


def detect(raw):
    keys = eva.trunk_keys(raw)
    return ("attn_pool.latent" in keys and "norm_pre.weight" in keys and "blocks.0.attn.qkv.weight" in keys
            and "pos_embed" in keys and "patch_embed.proj.bias" not in keys)


def prepare(raw):
    """timm's `VisionTransformer` names (the tower alone; the zero-bias `head` named its projection)."""
    return timm.prepare(dataclasses.replace(raw, tensors=eva.trunk(raw.tensors)))


def metadata(raw, tensors):
    token, shape = "cls_token" in tensors, tensors["pos_embed"].shape
    if len(shape) != 3 or shape[1] <= token:
        raise ValueError(f"{raw.path}: pos_embed of shape {shape}; PE-core's is (1, {'1 + ' if token else ''}patches, "
                         "width).")
    side = math.isqrt(shape[1] - token)
    heads = eva.open_clip_heads(raw, "map", "PE-core") if eva.OPEN_CLIP + "pos_embed" in raw.tensors else None
    return Metadata(num_heads=heads, approximate_gelu=False, layer_norm_epsilon=EPSILON, preprocessing="siglip",
                    rope_theta=THETA, rope_form="axial", rope_reference_grid=(side, side),
                    rope_offset=1.0 if token else 0.0, map_heads=POOL_HEADS, pooling="map")


FORMAT = Format(name="pe_torch", table=timm.TABLE, detect=detect, prepare=prepare, metadata=metadata,
                interpolation="bicubic_antialias")  # timm's resample_abs_pos_embed
