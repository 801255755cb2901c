"""timm's `Eva` layout of the axial / mixed rotary models: EVA-02 (Fang et al., 2023; timm's
`eva02_{tiny,small,base,large}_patch14_{224,336,448}.*`) read here, and written (`format="timm_eva"`)
for EVA-02 and Naver's RoPE-ViT (`vit_*_patch16_rope[_mixed]_224`, read by `formats.rope_vit`).

EVA-02's keys (timm `eva.py`, `Eva` with `use_rot_pos_emb=True, ref_feat_shape=(16, 16)`): a learned
`pos_embed` whose first row is the class token's, the axial rotation in the `'ij'` order (period
10000, indices scaled to the 16 x 16 grid of 224 px), q / v biases without a key bias, a SwiGLU MLP,
`fc_norm` on the mean of the patch tokens, no LayerScale. Ti / S: a fused `qkv` with `q_bias` /
`v_bias` and the packed `mlp.fc1` (timm's `GluMlp`, gate first); B / L (`qkv_fused=False,
scale_mlp=True`): `q_proj` / `k_proj` (no bias) / `v_proj`, and `mlp.fc1_g` / `fc1_x` with the inner
norm `mlp.norm` before `fc2` (timm's `SwiGLU`). Every EVA-02 definition pairs the two, so the
writer writes the unfused attention exactly where the MLP has its inner norm.

EVA-CLIP's image towers (timm `eva02_{base_patch16,large_patch14}_clip_{224,336}`, Sun et al., 2023) are
B / L's layout plus the attention's inner norm `attn.norm` before `proj` (`scale_attn_inner`,
`attention_norm`), the final `norm` on the tokens, the class token pooled and the CLIP image projection
as timm's `head` with its trained bias (`projection_dim`, `projection_bias`): a timm file, or OpenCLIP's
(`open_clip_model.safetensors` / `open_clip_pytorch_model.bin` of its `EVA02-*` models: the image tower
under `visual.trunk.`, the text tower, `keras_vit.text.open_clip`'s, under `text.`). Read only: the
writer refuses those two options."""

import dataclasses

import numpy as np

from keras_vit.weights import containers
from keras_vit.weights.canonical import ATTN_NORM, MLP_NORM, PROJECTION, PROJECTION_BIAS, Metadata
from keras_vit.weights.formats import dinov3, rope_vit, timm
from keras_vit.weights.formats.base import BLOCK_OPTIONS, Format
from keras_vit.weights.formats.common import norm_rows
from keras_vit.weights.lazy import LazyArray, concat
from keras_vit.weights.table import Row, Table, pairs
from keras_vit.weights.transforms import transpose

# EVA-02's rotary settings (timm `Eva` defaults and its model definitions), LayerNorm epsilon (timm's `LayerNorm`).
THETA, INDEXING, REFERENCE_GRID, EPSILON = 10000.0, "ij", (16, 16), 1e-6
_UNFUSED = ("q_proj", "k_proj", "v_proj")
OPEN_CLIP = "visual.trunk."  # OpenCLIP's timm image towers (its `TimmModel`)
# EVA-CLIP's image projection, timm's `head`, under these names between `prepare` and the table.
CLIP_PROJECTION = ("head.weight (EVA-CLIP projection)", "head.bias (EVA-CLIP projection)")


def trunk(tensors):
    """OpenCLIP's timm image tower alone, without its `visual.trunk.` prefix (its other keys are the text
    tower's); else `tensors` as they are."""
    if OPEN_CLIP + "pos_embed" not in tensors:
        return dict(tensors)
    return {k[len(OPEN_CLIP):]: v for k, v in tensors.items() if k.startswith(OPEN_CLIP)}


def trunk_keys(raw):
    return trunk(raw.tensors).keys()


def detect(raw):
    keys = trunk_keys(raw)
    return ("patch_embed.proj.weight" in keys and "pos_embed" in keys
            and ("blocks.0.attn.q_bias" in keys or "blocks.0.attn.q_proj.weight" in keys))


def is_eva_clip(keys):
    """Whether timm Eva `keys` are an EVA-CLIP image tower's: the attention's inner norm, no `fc_norm`."""
    return "blocks.0.attn.norm.weight" in keys and "fc_norm.weight" not in keys


def prepare(raw):
    """timm `VisionTransformer` names: OpenCLIP's image tower alone, the unfused q / k / v joined, EVA-CLIP's
    `head` named its image projection, then DINOv3's renames (q / v biases around a zero key bias, `fc1_g` /
    `fc1_x` packed gate first)."""
    tensors = trunk(raw.tensors)
    if is_eva_clip(tensors):
        for name, pseudo in zip(("head.weight", "head.bias"), CLIP_PROJECTION):
            if name in tensors:
                tensors[pseudo] = tensors.pop(name)
    for key in [k for k in tensors if k.endswith(".attn.q_proj.weight")]:
        prefix = key[: -len("q_proj.weight")]
        if all(prefix + f"{name}.weight" in tensors for name in _UNFUSED):  # else the table names the unmatched keys
            tensors[prefix + "qkv.weight"] = concat([tensors.pop(prefix + f"{name}.weight") for name in _UNFUSED], axis=0)
            for name in "qv":
                if prefix + f"{name}_proj.bias" in tensors:
                    tensors[prefix + f"{name}_bias"] = tensors.pop(prefix + f"{name}_proj.bias")
    return dinov3.prepare(dataclasses.replace(raw, tensors=tensors))


def open_clip_vision(raw):
    """`(vision_cfg, heads)` of an OpenCLIP timm image tower's `open_clip_config.json` (`{}` without
    one): its `model_cfg.vision_cfg` and the head count of its `timm_model_kwargs.num_heads` (None:
    not recorded, the width's named models'); a part of another type refused in one line."""
    model = (raw.meta.get("open_clip_config") or {}).get("model_cfg", {})
    vision = model.get("vision_cfg", {}) if isinstance(model, dict) else None
    kwargs = (vision.get("timm_model_kwargs") or {}) if isinstance(vision, dict) else None
    if not isinstance(kwargs, dict):
        raise ValueError(f"{raw.path}: its open_clip_config.json's model_cfg / vision_cfg / timm_model_kwargs is not "
                         "a JSON object.")
    heads = kwargs.get("num_heads")
    if heads is not None and not (isinstance(heads, int) and not isinstance(heads, bool) and heads > 0):
        raise ValueError(f"{raw.path}: its open_clip_config.json's timm_model_kwargs num_heads={heads!r}; expected a "
                         "whole number >= 1 (or no num_heads).")
    return vision, heads


def open_clip_heads(raw, pool="token", family="EVA-CLIP"):
    """The head count an `open_clip_config.json`'s `vision_cfg` gives a timm image tower
    (`open_clip_vision`); another `timm_pool` than `pool`, or a projection besides timm's head,
    refused in one line."""
    vision, heads = open_clip_vision(raw)
    found, proj = vision.get("timm_pool", pool), vision.get("timm_proj")
    if found != pool or proj not in (None, ""):
        raise ValueError(f"{raw.path}: an OpenCLIP timm image tower with timm_pool={found!r}, timm_proj={proj!r}; "
                         f"keras_vit reads {family}'s (timm_pool {pool!r}, timm_proj null: timm's head projects).")
    return heads


def metadata(raw, tensors):
    keys = trunk_keys(raw)
    clip = is_eva_clip(keys)  # EVA-CLIP: the class token pooled, OpenCLIP's preprocessing
    heads = open_clip_heads(raw) if OPEN_CLIP + "pos_embed" in raw.tensors else None
    return Metadata(num_heads=heads, approximate_gelu=False, layer_norm_epsilon=EPSILON,
                    preprocessing="clip" if clip else "eva02", rope_theta=THETA, rope_form="axial", key_bias=False,
                    rope_indexing=INDEXING, rope_reference_grid=REFERENCE_GRID,
                    pooling="avg" if "fc_norm.weight" in keys else "token" if clip else None)  # timm's global_pool


def _split(value, parts):
    size = value.shape[0] // parts
    return [value.rows(j * size, (j + 1) * size) for j in range(parts)]


def _stacked_freqs(tensors):
    """`rope.freqs` `(2, depth, heads, head_dim / 2)` of the blocks' `(2, heads, head_dim / 2)`."""
    blocks = [tensors.pop(k) for k in sorted((k for k in tensors if k.endswith(".attn.rope_freqs")),
                                             key=lambda k: int(k.split(".")[1]))]
    shape = (2, len(blocks), *blocks[0].shape[1:])
    return LazyArray(shape, np.float32, lambda: np.stack([b.load() for b in blocks], axis=1), "rope frequencies")


def _eva_names(ckpt, tensors):
    """timm `VisionTransformer` names -> timm's Eva names for `ckpt` (EVA-02 or RoPE-ViT)."""
    unfused, out = ckpt.mlp_norm, {}
    if any(k.endswith(".attn.rope_freqs") for k in tensors):
        out[rope_vit.FREQS] = _stacked_freqs(tensors)
    for key, value in tensors.items():
        prefix = key.rsplit(".", 2)[0] + "."
        if key.endswith(".attn.qkv.weight") and unfused:
            out.update({prefix + f"{name}.weight": part for name, part in zip(_UNFUSED, _split(value, 3))})
        elif key.endswith(".attn.qkv.bias") and ckpt.key_bias is False:
            query, _, val = _split(value, 3)
            names = ("q_proj.bias", "v_proj.bias") if unfused else ("q_bias", "v_bias")
            out.update({prefix + names[0]: query, prefix + names[1]: val})
        elif ".mlp.fc1." in key and ckpt.mlp_norm and ckpt.mlp == "swiglu":
            gate, val = _split(value, 2)
            out.update({key.replace(".fc1.", ".fc1_g."): gate, key.replace(".fc1.", ".fc1_x."): val})
        else:
            out[key.replace(".ls1.gamma", ".gamma_1").replace(".ls2.gamma", ".gamma_2")] = value
    return out


def _settings(meta, table):
    """What of a model timm's Eva file does not hold but its layout implies (the mixed form's period only
    initialises the frequencies the file holds)."""
    grid = meta.rope_reference_grid
    theta = None if meta.rope_form == "mixed" else float(meta.rope_theta)
    return (bool(table), theta, meta.rope_form, meta.rope_indexing or "xy",
            None if grid is None else tuple(int(n) for n in grid))


def write(path, ckpt):
    """timm's Eva state dict as `.safetensors`; refused (one line) where the file would be read back
    as another model (its rotary settings are those the layout implies: EVA-02's or RoPE-ViT's)."""
    if ckpt.position_embedding != "rope" or ckpt.rope_form not in ("axial", "mixed"):
        raise ValueError(f"{ckpt.path}: timm's Eva layout (format='timm_eva') holds the axial and mixed rotary forms "
                         "(RoPE-ViT, EVA-02); " + ("use format='timm_dinov3'." if ckpt.position_embedding == "rope"
                                                    else "use format='timm'."))
    ckpt.require_class_token_head("timm_eva")
    tensors = ckpt.tensors
    if ckpt.rope_absolute and ckpt.layer_scale:  # RoPE-ViT `_ape`: timm's `no_embed_class` table
        tensors = timm.without_embed_class(tensors, ckpt.position_prefix)
    tensors = _eva_names(ckpt, FORMAT.from_canonical(tensors, ckpt.num_heads, f"export of {ckpt.path} to timm_eva"))
    raw = containers.RawCheckpoint(path, "safetensors", tensors)
    reader = next((f for f in (FORMAT, rope_vit.FORMAT) if f.detect(raw)), None)
    implied = reader and _settings(reader.metadata(raw, tensors), "pos_embed" in tensors)
    if implied != _settings(ckpt, ckpt.rope_absolute):
        raise ValueError(
            f"{ckpt.path}: timm's Eva layout records EVA-02's rotary settings (a position table, no LayerScale, period "
            f"{THETA:g}, 'ij', reference grid {REFERENCE_GRID}) and RoPE-ViT's (LayerScale, axial period "
            f"{rope_vit.AXIAL_THETA:g} or mixed, 'xy', no reference grid) only; this model has (table, period, form, "
            f"indexing, reference grid) = {_settings(ckpt, ckpt.rope_absolute)}: save it with model.save('x.keras').")
    containers.write_safetensors(path, {k: v.astype(np.float32) for k, v in tensors.items()}, {"format": "pt"})


FORMAT = Format(
    name="eva_torch",
    table=Table(rope_vit.FORMAT.table.rows + norm_rows(MLP_NORM, "blocks.{i}.mlp.norm.", optional=True)
                + norm_rows(ATTN_NORM, "blocks.{i}.attn.norm.", optional=True)
                + (Row(PROJECTION, CLIP_PROJECTION[0], transpose, transpose, optional=True),)
                + pairs((PROJECTION_BIAS, CLIP_PROJECTION[1]), optional=True)),
    detect=detect,
    prepare=prepare,
    metadata=metadata,
    write=write,
    export_name="timm_eva",
    writes_rope=True,
    block_options=BLOCK_OPTIONS,
    interpolation="bicubic_antialias",  # timm's resample_abs_pos_embed
)
