"""Hugging Face transformers' CLIP image towers: `CLIPVisionModel`, `CLIPVisionModelWithProjection`,
and the `vision_model` (with its `visual_projection`) of a `CLIPModel` or `MetaClip2Model` folder,
whose text tower is left out. `config.json` (a pair's `vision_config`) gives the activation
(`hidden_act`, "quick_gelu" by default), heads, grid and LayerNorm epsilon (1e-5 by default).

The model: a plain ViT with `pre_layrnorm` (`pre_norm`), a bias-free patch embedding
(`patch_bias=False`), `post_layernorm` on the pooled class token and the bias-free
`visual_projection` (`projection_dim`); keras_vit normalises every token with that final
LayerNorm (as timm and OpenCLIP do), which gives the same pooled features, so its tokens
(`pooling=None`) are `last_hidden_state` after `post_layernorm`.

Written by `export(format="hf")` for models with CLIP's options (`HF`, which hands the other
families to `formats.hf_families`): a `CLIPVisionModelWithProjection` folder, or a
`CLIPVisionModel` without a projection."""

import dataclasses

from keras_vit.weights.canonical import PRE_NORM, PROJECTION, Metadata
from keras_vit.weights.formats import hf_families, huggingface
from keras_vit.weights.formats.base import CLIP_OPTIONS, Format
from keras_vit.weights.formats.common import norm_rows, qkv_rows, torch_rows
from keras_vit.weights.formats.hf_families import SIGLIP_LAYER, strip_prefixes
from keras_vit.weights.formats.huggingface import common_config, hf_preprocessor_config, write_folder
from keras_vit.weights.table import Row, Table
from keras_vit.weights.transforms import transpose

MODEL_TYPES = ("clip", "metaclip_2")
VISION_MODEL_TYPES = ("clip_vision_model", "metaclip_2_vision_model")
# `CLIPVisionConfig` / `MetaClip2VisionConfig` defaults, where `config.json` leaves them out.
HIDDEN_ACT, EPSILON = "quick_gelu", 1e-5

TABLE = Table(
    torch_rows(
        "embeddings.patch_embedding.", "embeddings.class_embedding", "embeddings.position_embedding.weight",
        SIGLIP_LAYER + "layer_norm1.", SIGLIP_LAYER + "layer_norm2.", SIGLIP_LAYER + "self_attn.out_proj.",
        SIGLIP_LAYER + "mlp.fc1.", SIGLIP_LAYER + "mlp.fc2.", "post_layernorm.", None, None,
    )
    + qkv_rows(SIGLIP_LAYER + "self_attn.{n}_proj.", ("q", "k", "v"))
    + norm_rows(PRE_NORM, "pre_layrnorm.")
    + (Row(PROJECTION, "visual_projection.weight", transpose, transpose, optional=True),)
)


def _config(raw):
    """The image tower's config: `config.json`, or a CLIP pair's `vision_config`."""
    return hf_families.vision_config(raw, MODEL_TYPES)


def prepare(raw):
    """Strips `vision_model.` (leaving out a pair's text tower, its logit scale and position-id
    buffers), gives the class token and the position embedding their batch axes."""
    tensors = strip_prefixes(raw, ("vision_model.",), drop=("text_model.", "text_projection.", "logit_scale"))
    tensors = {k: v for k, v in tensors.items() if not k.endswith("position_ids")}
    for key, shape in (("embeddings.class_embedding", 1), ("embeddings.position_embedding.weight", 2)):
        if key in tensors and len(tensors[key].shape) == shape:
            tensors[key] = tensors[key].reshape(1, *((1,) if shape == 1 else ()), *tensors[key].shape)
    return tensors


def metadata(raw, tensors):
    """What the image tower's config records (its class's defaults where it is silent): the
    activation, heads, grid, LayerNorm epsilon; CLIP's preprocessing, the class token pooled."""
    config = _config(raw)
    act = config.get("hidden_act", HIDDEN_ACT)
    return Metadata(
        approximate_gelu=False if act == "quick_gelu" else huggingface.gelu(config, HIDDEN_ACT),
        quick_gelu=act == "quick_gelu",
        num_heads=config.get("num_attention_heads"),
        grid=huggingface.config_grid(config, raw.path),
        layer_norm_epsilon=config.get("layer_norm_eps", EPSILON),
        pooling="token",
        preprocessing="clip",
        depth=config.get("num_hidden_layers"),
    )


def _is_clip(raw):
    model_type = (raw.meta.get("config") or {}).get("model_type")
    if model_type is not None:
        return model_type in MODEL_TYPES + VISION_MODEL_TYPES
    return any(key.endswith("pre_layrnorm.weight") for key in raw.tensors)


CLIP = Format(name="hf_clip", table=TABLE, detect=_is_clip, prepare=prepare, metadata=metadata,
              interpolation="bicubic")  # CLIPVisionEmbeddings.interpolate_pos_encoding

# What a transformers CLIP image tower holds (`Checkpoint` properties and `architecture()` arguments).
_NEEDS = dict(class_token=True, distillation_token=False, num_registers=0, position_embedding="learned",
              layer_scale=False, mlp="gelu", stem=None, classes=None, representation_size=None, fc_norm=False,
              pre_norm=True, patch_bias=False, qk_norm=False, norm="layernorm", qkv_bias=True, proj_bias=True,
              mlp_bias=True)


def _check(ckpt):
    architecture = ckpt.architecture()
    for name, wanted in _NEEDS.items():
        found = architecture[name] if name in architecture else getattr(ckpt, name)
        if found != wanted:
            raise ValueError(
                f"Cannot export {ckpt.path} as a Hugging Face CLIP image tower: it has {name}={found!r}, CLIP needs "
                f"{wanted!r}" + (" (export it with include_top=False)" if name == "classes" else "") + "."
            )
    rows, columns = ckpt.patch_grid
    if rows != columns:
        raise ValueError(f"Cannot export {ckpt.path} as a Hugging Face CLIP image tower: its {rows}x{columns} patch "
                         "grid is not square (CLIPVisionConfig's image_size is one number).")


def _write_clip(folder, ckpt):
    """A `CLIPVisionModelWithProjection` (a `CLIPVisionModel` without a projection) folder."""
    _check(ckpt)
    theirs = CLIP.from_canonical(ckpt.tensors, ckpt.num_heads, f"export of {ckpt.path} to hf")
    projection = ckpt.projection_dim
    prefix = "vision_model." if projection else ""  # transformers 5's CLIPVisionModel names have none
    tensors = {}
    for key, value in theirs.items():
        if key == "embeddings.class_embedding":
            value = value.reshape(value.shape[-1])
        elif key == "embeddings.position_embedding.weight":  # an nn.Embedding: no batch axis
            value = value.reshape(*value.shape[1:])
        tensors[key if key.startswith("visual_projection.") else prefix + key] = value
    architecture = "CLIPVisionModelWithProjection" if projection else "CLIPVisionModel"
    config = {
        **common_config(ckpt, architecture, "clip_vision_model"),
        "hidden_act": "quick_gelu" if ckpt.quick_gelu else "gelu" if ckpt.approximate_gelu is False else "gelu_pytorch_tanh",
        "layer_norm_eps": ckpt.layer_norm_epsilon or EPSILON,
        "intermediate_size": ckpt.mlp_dim,
        "attention_dropout": 0.0,
        **({"projection_dim": projection} if projection else {}),
    }
    preprocessor = hf_preprocessor_config(ckpt, "CLIPImageProcessor")
    size = preprocessor["size"]["height"]
    preprocessor.update(size={"shortest_edge": size}, do_center_crop=True, crop_size={"height": size, "width": size})
    write_folder(folder, tensors, config, preprocessor)


def write(folder, ckpt):
    """CLIP's image tower where `ckpt` has CLIP's options, else the family's model (`hf_families.write`)."""
    if ckpt.pre_norm or ckpt.projection_dim or not ckpt.patch_bias:
        return _write_clip(folder, ckpt)
    return hf_families.write(folder, ckpt)


# The "hf" format, writing each family's model, CLIP's included.
HF = dataclasses.replace(hf_families.HF, write=write, block_options=hf_families.HF.block_options + CLIP_OPTIONS)
