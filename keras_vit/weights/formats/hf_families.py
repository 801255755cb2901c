"""Hugging Face transformers folders of the plain-ViT families beyond the paper's model
(SPEC section 7): DeiT (`DeiTModel`, `DeiTForImageClassification[WithTeacher]`), DINOv2
(`Dinov2Model`, `Dinov2WithRegistersModel`), DINOv3 (`DINOv3ViTModel`) and SigLIP image towers
(`SiglipVisionModel`, `Siglip2VisionModel` for NaFlex, or the `vision_model` of a `SiglipModel`); `config.json`
gives the GELU, heads, grid and LayerNorm epsilon, as for the paper's ViT (`formats.huggingface`).

Written by `export(format="hf")`, whose `write` (`HF`) picks the family from the checkpoint: an
EoMT head makes an `EomtForUniversalSegmentation` (`formats.eomt`), a distillation token makes a DeiT (`DeiTForImageClassificationWithTeacher` with both heads,
`DeiTForImageClassification` with one, else `DeiTModel`), NaFlex inputs a `Siglip2VisionModel`,
rotary position embeddings (or no key bias) a `DINOv3ViTModel`, LayerScale or registers a DINOv2
(`Dinov2Model` / `Dinov2WithRegistersModel`, no head), no class token a `SiglipVisionModel`
(its MAP head, or none); anything else is the paper's ViT. The bias options (`qkv_bias`,
`proj_bias`, `mlp_bias`) are written by DINOv3 only: the other families refuse them."""

import dataclasses
import functools
import math

import numpy as np

from keras_vit.weights.canonical import DIST, EOMT_QUERIES, HEAD_DIST, LAYER_SCALE, MAP, MAP_ATTN, POSEMB, QKV, REG, Metadata
from keras_vit.weights.formats import eomt, huggingface
from keras_vit.weights.formats.base import Format
from keras_vit.weights.formats.common import config_pair, linear_row, qkv_rows, torch_rows
from keras_vit.weights.formats.huggingface import RESAMPLE, common_config, hf_config, hf_preprocessor_config, write_folder
from keras_vit.weights.formats.timm import fused_qkv_from_canonical, fused_qkv_to_canonical
from keras_vit.weights.lazy import LazyArray, concat
from keras_vit.weights.table import Row, Table, pairs
from keras_vit.weights.transforms import heads_to_out, out_to_heads
from keras_vit.config.vit_config import ROPE_THETA

LAYER = "encoder.layer.{i}."
DINOV3_LAYER = "layer.{i}."
SIGLIP_LAYER = "encoder.layers.{i}."


DEIT_TABLE = huggingface.TABLE + (
    *pairs((DIST, "embeddings.distillation_token"), optional=True),
    linear_row("head_dist/", "distillation_classifier.", optional=True),
)

DINOV2_TABLE = Table(
    torch_rows(
        "embeddings.patch_embeddings.projection.", "embeddings.cls_token", "embeddings.position_embeddings",
        LAYER + "norm1.", LAYER + "norm2.", LAYER + "attention.output.dense.", LAYER + "mlp.fc1.",
        LAYER + "mlp.fc2.", "layernorm.", None, None,
    )
    + qkv_rows(LAYER + "attention.attention.{n}.")
    + pairs((LAYER_SCALE[0], LAYER + "layer_scale1.lambda1"), (LAYER_SCALE[1], LAYER + "layer_scale2.lambda1"))
    + pairs((REG, "embeddings.register_tokens"), optional=True)
)

DINOV3_TABLE = Table(
    tuple(row for row in torch_rows(
        "embeddings.patch_embeddings.", "embeddings.cls_token", "(none)", DINOV3_LAYER + "norm1.",
        DINOV3_LAYER + "norm2.", DINOV3_LAYER + "attention.o_proj.", DINOV3_LAYER + "mlp.up_proj.",
        DINOV3_LAYER + "mlp.down_proj.", "norm.", None, None,
    ) if row.canonical[0].text != POSEMB)
    + qkv_rows(DINOV3_LAYER + "attention.{n}_proj.", ("q", "k", "v"), bias_free=True)
    + pairs((LAYER_SCALE[0], DINOV3_LAYER + "layer_scale1.lambda1"),
            (LAYER_SCALE[1], DINOV3_LAYER + "layer_scale2.lambda1"))
    + pairs((REG, "embeddings.register_tokens"), optional=True)
)

MAP_ROWS = (
    *pairs((MAP + "probe", "head.probe"), optional=True),
    Row(
        tuple(MAP_ATTN + f"{n}/kernel" for n in QKV) + tuple(MAP_ATTN + f"{n}/bias" for n in QKV),
        ("head.attention.in_proj_weight", "head.attention.in_proj_bias"),
        fused_qkv_to_canonical,
        fused_qkv_from_canonical,
        optional=True,
    ),
    Row(MAP_ATTN + "out/kernel", "head.attention.out_proj.weight", out_to_heads, heads_to_out, optional=True),
    *pairs((MAP_ATTN + "out/bias", "head.attention.out_proj.bias"), optional=True),
    *pairs(*((MAP + "LayerNorm_0/" + c, "head.layernorm." + t) for c, t in (("scale", "weight"), ("bias", "bias"))),
           optional=True),
    linear_row(MAP + "MlpBlock_0/Dense_0/", "head.mlp.fc1.", optional=True),
    linear_row(MAP + "MlpBlock_0/Dense_1/", "head.mlp.fc2.", optional=True),
)

SIGLIP_TABLE = Table(
    torch_rows(
        "embeddings.patch_embedding.", None, "embeddings.position_embedding.weight",
        SIGLIP_LAYER + "layer_norm1.", SIGLIP_LAYER + "layer_norm2.", SIGLIP_LAYER + "self_attn.out_proj.",
        SIGLIP_LAYER + "mlp.fc1.", SIGLIP_LAYER + "mlp.fc2.", "post_layernorm.", None, None,
    )
    + qkv_rows(SIGLIP_LAYER + "self_attn.{n}_proj.", ("q", "k", "v"))
    + MAP_ROWS
)


def _config(raw):
    """The model's `config.json` (a SigLIP pair's `vision_config`)."""
    return vision_config(raw, ("siglip", "siglip2"))


def vision_config(raw, model_types):
    """The image tower's config: `config.json`, or the `vision_config` (which must be an object) of
    an image-text pair whose `model_type` is one of `model_types`."""
    config = raw.meta.get("config") or {}
    if config.get("model_type") not in model_types or "vision_config" not in config:
        return config
    vision = config["vision_config"]
    if not isinstance(vision, dict):
        raise ValueError(f"{raw.path}: its config's vision_config is a {type(vision).__name__}; expected a JSON "
                         "object ({...}) of the image tower's settings.")
    return vision


def _detector(model_types, marker):
    """Detects by `config.json`'s model_type, else (a bare weights file) by a key containing `marker`."""

    def detect(raw):
        model_type = (raw.meta.get("config") or {}).get("model_type")
        if model_type is not None:
            return model_type in model_types
        return any(marker in key for key in raw.tensors)

    return detect


def strip_prefixes(raw, prefixes, drop=()):
    """`raw`'s tensors without the first of `prefixes` each key starts with; keys starting
    with any of `drop` left out."""
    out = {}
    for key, value in raw.tensors.items():
        key = next((key[len(p):] for p in prefixes if key.startswith(p)), key)
        if not key.startswith(drop):
            out[key] = value
    return out


def _refuse_head(tensors, raw, what):
    if any(k.startswith("classifier.") for k in tensors):
        raise ValueError(f"{raw.path}: {what}; load the backbone (Dinov2Model) with include_top=False.")


def prepare_deit(raw):
    """Strips `deit.`, renames transformers-5 keys, names the teacher model's class-token head
    as the plain classifier's."""
    tensors = huggingface.V5_NAMES.rename(strip_prefixes(raw, ("deit.",), drop=("embeddings.mask_token",)))
    return {("classifier." + k[len("cls_classifier."):] if k.startswith("cls_classifier.") else k): v
            for k, v in tensors.items()}


def prepare_dinov2(raw):
    """Strips `dinov2.`, leaves out the mask token, names the SwiGLU layers as the MLP's."""
    tensors = strip_prefixes(raw, ("dinov2.",), drop=("embeddings.mask_token",))
    _refuse_head(tensors, raw, "Dinov2ForImageClassification's head reads the class token and the mean "
                               "of the patch tokens side by side, which keras_vit's heads do not")
    return {k.replace(".mlp.weights_in.", ".mlp.fc1.").replace(".mlp.weights_out.", ".mlp.fc2."): v
            for k, v in tensors.items()}


def _dinov3_biases(config, path):
    """`(qkv_bias, key_bias)` of a `DINOv3ViTConfig`: keras_vit's one switch for the query and value
    biases (`qkv_bias`), and `key_bias` beside it (a key bias only with them)."""
    query, key, value = (config.get(name, default) for name, default in
                         (("query_bias", True), ("key_bias", False), ("value_bias", True)))
    if query != value or (key and not query):
        raise ValueError(f"{path}: DINOv3 config query_bias={query!r}, key_bias={key!r}, value_bias={value!r}; keras_vit "
                         "reads query_bias = value_bias, and a key bias only with them.")
    return bool(query), bool(key)


def prepare_dinov3(raw):
    """Strips `model.` (the encoder's prefix in the model's own state dict; its files have none),
    leaves out the mask token and an empty register array, gives each block's keys a zero bias
    where the queries have one and the keys none (transformers' `key_bias=False`: the model drops
    it with `key_bias=False`), packs a gated MLP's `gate_proj` and `up_proj` as the SwiGLU layer's
    `[gate | value]` (`mlp.up_proj`)."""
    config = _config(raw)
    qkv_bias, key_bias = _dinov3_biases(config, raw.path)
    if config.get("use_gated_mlp") and config.get("hidden_act", "gelu") != "silu":
        raise ValueError(
            f"{raw.path}: a gated MLP with hidden_act={config['hidden_act']!r}; keras_vit's SwiGLU is SiLU-gated.")
    tensors = strip_prefixes(raw, ("model.",), drop=("embeddings.mask_token",))
    if 0 in getattr(tensors.get("embeddings.register_tokens"), "shape", (1,)):  # `num_register_tokens=0`
        del tensors["embeddings.register_tokens"]
    for key in [k for k in tensors if k.endswith(".attention.k_proj.weight") and qkv_bias and not key_bias]:
        zeros = np.zeros(tensors[key].shape[0], np.float32)
        tensors[key[: -len("weight")] + "bias"] = LazyArray.wrap(zeros, "zero key bias")
    for key in [k for k in tensors if ".mlp.gate_proj." in k]:
        up = key.replace(".gate_proj.", ".up_proj.")
        if up in tensors:  # else the table names the unmatched key
            tensors[up] = concat([tensors.pop(key), tensors[up]], axis=0)
    return tensors


def metadata_dinov3(raw, tensors):
    """`metadata`, with the rope period (`rope_theta`, default 100), the key bias (default none) and
    `DINOv3ViTConfig`'s LayerNorm epsilon (1e-5)."""
    config = _config(raw)
    gated = any(".mlp.gate_proj." in k for k in raw.tensors)
    meta = metadata(raw, tensors, preprocessing="dinov3", gelu=not gated)
    key_bias = _dinov3_biases(config, raw.path)[1]
    return meta.replace(rope_theta=config.get("rope_theta", ROPE_THETA), key_bias=key_bias,
                        layer_norm_epsilon=config.get("layer_norm_eps", 1e-5))


def prepare_siglip(raw):
    """Strips `vision_model.` (leaving out a SiglipModel's text tower), gives the position
    embedding its batch axis."""
    tensors = strip_prefixes(raw, ("vision_model.",), drop=("text_model.", "logit_scale", "logit_bias"))
    key = "embeddings.position_embedding.weight"
    if key in tensors and len(tensors[key].shape) == 2:
        tensors[key] = tensors[key].reshape(1, *tensors[key].shape)
    return tensors


def prepare_siglip2(raw):
    """`prepare_siglip`, with the patch embedding, an `nn.Linear` over each patch's pixels
    (row by row, channels last), laid out as the convolution's `(out, channels, patch, patch)`."""
    tensors = prepare_siglip(raw)
    key = "embeddings.patch_embedding.weight"
    if key in tensors and len(tensors[key].shape) == 2:
        width, values = tensors[key].shape
        config = _config(raw)
        channels = 3  # RGB: keras_vit's models take three channels
        patch = config_pair(config["patch_size"], "patch_size", raw.path)[0] if "patch_size" in config else math.isqrt(values // channels)
        if channels * patch * patch != values:
            raise ValueError(f"{raw.path}: {key} has {values} inputs, not patch_size={patch} squared times "
                             f"{channels} channels.")
        tensors[key] = tensors[key].reshape(width, patch, patch, channels).transpose(0, 3, 1, 2)
    return tensors


def _is_siglip2(raw):
    """By `config.json`'s model_type, else (a bare weights file) by a linear patch embedding."""
    model_type = (raw.meta.get("config") or {}).get("model_type")
    if model_type is not None:
        return model_type in ("siglip2", "siglip2_vision_model")
    return any(key.endswith("embeddings.patch_embedding.weight") and len(value.shape) == 2
               for key, value in raw.tensors.items())


def metadata_siglip2(raw, tensors):
    """`metadata` of a NaFlex model: the square grid of `num_patches` position embeddings."""
    meta = metadata(raw, tensors, preprocessing="siglip2", hidden_act="gelu_pytorch_tanh")
    posemb = tensors.get("embeddings.position_embedding.weight")
    rows = posemb.shape[1] if posemb is not None else 0
    side = math.isqrt(rows)
    if side * side != rows:
        raise ValueError(f"{raw.path}: {rows} position embeddings do not form the square grid SigLIP 2 resizes.")
    return meta.replace(grid=(side, side), naflex=True)


def metadata(raw, tensors, preprocessing=None, hidden_act="gelu", gelu=True):
    """What `config.json` records; `preprocessing`: the family's (`keras_vit.preprocessing`);
    `hidden_act`: the family's GELU where there is no `config.json` or it names none (its
    config class's default); `gelu=False`: a model without GELU (a gated SiLU MLP)."""
    config = _config(raw)
    return Metadata(
        approximate_gelu=huggingface.gelu(config, hidden_act) if gelu else None,
        num_heads=config.get("num_attention_heads"),
        grid=huggingface.config_grid(config, raw.path),
        layer_norm_epsilon=config.get("layer_norm_eps"),
        preprocessing=preprocessing,
        depth=config.get("num_hidden_layers"),
    )


def metadata_dinov2(raw, tensors):
    """`metadata`; `Dinov2WithRegistersModel` resizes its position embeddings antialiased, as
    timm does (`Dinov2Model` does not)."""
    registers = _config(raw).get("model_type") == "dinov2_with_registers" or "embeddings.register_tokens" in tensors
    return metadata(raw, tensors, preprocessing="dinov2").replace(
        interpolation="bicubic_antialias" if registers else None)


# Each family's `interpolate_pos_encoding`: bicubic to the target grid, class (and distillation) rows kept.
DEIT = Format(
    name="hf_deit", table=DEIT_TABLE, detect=_detector(("deit",), "distillation_token"),
    prepare=prepare_deit, metadata=functools.partial(metadata, preprocessing="deit"), interpolation="bicubic",
)
DINOV2 = Format(
    name="hf_dinov2", table=DINOV2_TABLE,
    detect=_detector(("dinov2", "dinov2_with_registers"), "layer_scale1.lambda1"),
    prepare=prepare_dinov2, metadata=metadata_dinov2, interpolation="bicubic",
)
DINOV3 = Format(
    name="hf_dinov3", table=DINOV3_TABLE,
    detect=_detector(("dinov3_vit",), "attention.k_proj.weight"),
    prepare=prepare_dinov3, metadata=metadata_dinov3,
)
SIGLIP = Format(
    name="hf_siglip", table=SIGLIP_TABLE,
    detect=_detector(("siglip", "siglip_vision_model"), "embeddings.patch_embedding.weight"),
    # transformers' SiglipVisionConfig: hidden_act="gelu_pytorch_tanh" (what the hub's files leave out).
    prepare=prepare_siglip, metadata=functools.partial(metadata, preprocessing="siglip", hidden_act="gelu_pytorch_tanh"),
    interpolation="bicubic",
)

SIGLIP2 = Format(
    name="hf_siglip2", table=SIGLIP_TABLE,
    detect=_is_siglip2,
    prepare=prepare_siglip2, metadata=metadata_siglip2,
)


# What each family's transformers model holds (`Checkpoint` properties and `architecture()`
# arguments); anything else is refused.
_BIASES = dict(qkv_bias=True, proj_bias=True, mlp_bias=True)
_NEEDS = {
    "ViT": _BIASES,
    "DeiT": dict(distillation_token=True, num_registers=0, position_embedding="learned", layer_scale=False,
                 mlp="gelu", stem=None, representation_size=None, **_BIASES),
    "DINOv2": dict(class_token=True, distillation_token=False, position_embedding="learned", layer_scale=True,
                   stem=None, classes=None, representation_size=None, **_BIASES),
    "DINOv3": dict(class_token=True, distillation_token=False, position_embedding="rope", layer_scale=True,
                   stem=None, classes=None, representation_size=None, fc_norm=False),
    "SigLIP": dict(distillation_token=False, num_registers=0, position_embedding="learned", layer_scale=False,
                   mlp="gelu", stem=None, classes=None, representation_size=None, **_BIASES),
}


def _check(ckpt, family):
    architecture = ckpt.architecture()
    for name, wanted in _NEEDS[family].items():
        found = architecture[name] if name in _BIASES else getattr(ckpt, name)
        if found != wanted:
            raise ValueError(
                f"Cannot export {ckpt.path} as a Hugging Face {family} model: it has {name}={found!r}, "
                f"{family} needs {wanted!r}" + (" (export it with include_top=False)" if name == "classes" else "") + "."
            )


def _write_deit(folder, ckpt):
    _check(ckpt, "DeiT")
    ckpt.require_class_token_head("hf")
    teacher = HEAD_DIST[0] in ckpt.tensors
    architecture = ("DeiTForImageClassificationWithTeacher" if teacher else "DeiTForImageClassification"
                    if ckpt.classes else "DeiTModel")
    theirs = DEIT.from_canonical(ckpt.tensors, ckpt.num_heads, f"export of {ckpt.path} to hf")
    if ckpt.classes:
        head = "cls_classifier." if teacher else "classifier."
        theirs = {(head + k[len("classifier."):] if k.startswith("classifier.") else
                   k if k.startswith("distillation_classifier.") else "deit." + k): v for k, v in theirs.items()}
    write_folder(folder, theirs, hf_config(ckpt, architecture, "deit"), hf_preprocessor_config(ckpt))


def _swiglu_ratio(ckpt):
    """The `mlp_ratio` from which transformers' `Dinov2SwiGLUFFN` gets the model's MLP width."""
    ratio = 1.5 * ckpt.mlp_dim / ckpt.hidden_dim
    if (int(int(ckpt.hidden_dim * ratio) * 2 / 3) + 7) // 8 * 8 != ckpt.mlp_dim:
        raise ValueError(
            f"Cannot export {ckpt.path} as a Hugging Face DINOv2 model: its SwiGLU width {ckpt.mlp_dim} is not "
            "a multiple of 8, which transformers' Dinov2SwiGLUFFN rounds to."
        )
    return ratio


def _whole_if_integral(ratio):
    """`ratio` as an int where it is one (transformers' `Dinov2WithRegistersConfig` types it int)."""
    return int(ratio) if float(ratio).is_integer() else ratio


def _write_dinov2(folder, ckpt):
    write_folder(folder, *dinov2_parts(ckpt), hf_preprocessor_config(ckpt))


def dinov2_parts(ckpt):
    """`(tensors, config)` of `ckpt` as a transformers `Dinov2Model` (or with registers): also the
    backbone of a Depth Anything / DPT folder (`keras_vit.dense.writing`)."""
    _check(ckpt, "DINOv2")
    swiglu = ckpt.mlp == "swiglu"
    theirs = DINOV2.from_canonical(ckpt.tensors, ckpt.num_heads, f"export of {ckpt.path} to hf")
    if swiglu:  # transformers' file names of the packed SwiGLU layers
        theirs = {k.replace(".mlp.fc1.", ".mlp.weights_in.").replace(".mlp.fc2.", ".mlp.weights_out."): v
                  for k, v in theirs.items()}
    registers = ckpt.num_registers
    architecture, model_type = ("Dinov2WithRegistersModel", "dinov2_with_registers") if registers else ("Dinov2Model", "dinov2")
    config = {
        **common_config(ckpt, architecture, model_type),
        "mlp_ratio": _whole_if_integral(_swiglu_ratio(ckpt) if swiglu else ckpt.mlp_dim / ckpt.hidden_dim),
        "use_swiglu_ffn": swiglu,
        "qkv_bias": True,
        "layerscale_value": 1.0,
        "hidden_dropout_prob": 0.0,
        "attention_probs_dropout_prob": 0.0,
        "drop_path_rate": 0.0,
    }
    if registers:
        config["num_register_tokens"] = registers
    return theirs, config


def _write_siglip(folder, ckpt):
    _check(ckpt, "SigLIP")
    theirs = SIGLIP.from_canonical(ckpt.tensors, ckpt.num_heads, f"export of {ckpt.path} to hf")
    key = "embeddings.position_embedding.weight"
    theirs[key] = theirs[key].reshape(*theirs[key].shape[1:])  # an nn.Embedding: no batch axis
    config = {
        **common_config(ckpt, "SiglipVisionModel", "siglip_vision_model"),
        "intermediate_size": ckpt.mlp_dim,
        "attention_dropout": 0.0,
        "vision_use_head": MAP + "probe" in ckpt.tensors,
    }
    write_folder(folder, {"vision_model." + k: v for k, v in theirs.items()}, config,
                 hf_preprocessor_config(ckpt, "SiglipImageProcessor"))


def _write_dinov3(folder, ckpt):
    """A `DINOv3ViTModel` (no head): the q / k / v biases as `query_bias` / `key_bias` / `value_bias`,
    SwiGLU's `[gate | value]` as `gate_proj` / `up_proj`, the mask token (pre-training only) zero."""
    _check(ckpt, "DINOv3")
    if ckpt.rope_form not in (None, "dinov3"):
        raise ValueError(f"Cannot export {ckpt.path} as a Hugging Face DINOv3 model: it has rope_form="
                         f"{ckpt.rope_form!r}, DINOv3ViTModel rotates DINOv3's form only; save it with model.save('x.keras').")
    architecture = ckpt.architecture()
    swiglu = ckpt.mlp == "swiglu"
    theirs = DINOV3.from_canonical(ckpt.tensors, ckpt.num_heads, f"export of {ckpt.path} to hf")
    key_bias = architecture["qkv_bias"] and ckpt.key_bias is not False
    tensors = {}
    for key, value in theirs.items():
        if key.endswith(".attention.k_proj.bias") and not key_bias:
            continue
        if swiglu and ".mlp.up_proj." in key:
            half = value.shape[0] // 2
            tensors[key.replace(".up_proj.", ".gate_proj.")], value = value.rows(0, half), value.rows(half, 2 * half)
        tensors[key] = value
    width = ckpt.hidden_dim
    tensors["embeddings.mask_token"] = LazyArray.wrap(np.zeros((1, 1, width), np.float32), "mask token")
    tensors.setdefault("embeddings.register_tokens", LazyArray.wrap(np.zeros((1, 0, width), np.float32), "registers"))
    config = {
        **common_config(ckpt, "DINOv3ViTModel", "dinov3_vit"),
        "hidden_act": "silu" if swiglu else "gelu" if ckpt.approximate_gelu is False else "gelu_pytorch_tanh",
        "intermediate_size": ckpt.mlp_dim,
        "rope_theta": ckpt.rope_theta,
        "query_bias": architecture["qkv_bias"],
        "key_bias": key_bias,
        "value_bias": architecture["qkv_bias"],
        "proj_bias": architecture["proj_bias"],
        "mlp_bias": architecture["mlp_bias"],
        "use_gated_mlp": swiglu,
        "num_register_tokens": ckpt.num_registers,
        "layerscale_value": 1.0,
        "attention_dropout": 0.0,
        "drop_path_rate": 0.0,
    }
    write_folder(folder, tensors, config, hf_preprocessor_config(ckpt, "DINOv3ViTImageProcessor"))


def _write_siglip2(folder, ckpt):
    """A `Siglip2VisionModel`: the patch embedding as the `nn.Linear` over each patch's pixels (row
    by row, channels last), the position grid's `num_patches` rows as an `nn.Embedding`."""
    _check(ckpt, "SigLIP")
    theirs = SIGLIP2.from_canonical(ckpt.tensors, ckpt.num_heads, f"export of {ckpt.path} to hf")
    posemb, patch = "embeddings.position_embedding.weight", "embeddings.patch_embedding.weight"
    theirs[posemb] = theirs[posemb].reshape(*theirs[posemb].shape[1:])
    theirs[patch] = theirs[patch].transpose(0, 2, 3, 1).reshape(ckpt.hidden_dim, -1)
    config = {key: value for key, value in common_config(ckpt, "Siglip2VisionModel", "siglip2_vision_model").items()
              if key != "image_size"}
    config.update(intermediate_size=ckpt.mlp_dim, attention_dropout=0.0, vision_use_head=MAP + "probe" in ckpt.tensors,
                  num_patches=math.prod(ckpt.patch_grid))
    preprocessor = {key: value for key, value in hf_preprocessor_config(ckpt, "Siglip2ImageProcessor").items()
                    if key != "size"}
    preprocessor.update(resample=RESAMPLE["bilinear"], patch_size=ckpt.patch_size, max_num_patches=config["num_patches"])
    write_folder(folder, theirs, config, preprocessor)  # transformers 5's names: no `vision_model.`


def write(folder, ckpt):
    """The transformers folder of `ckpt`'s family (see the module docstring)."""
    if EOMT_QUERIES in ckpt.tensors:
        return eomt.write(folder, ckpt)
    if ckpt.distillation_token:
        return _write_deit(folder, ckpt)
    if ckpt.naflex:
        return _write_siglip2(folder, ckpt)
    if ckpt.position_embedding == "rope" or ckpt.key_bias is False:
        return _write_dinov3(folder, ckpt)
    if ckpt.layer_scale or ckpt.num_registers:
        return _write_dinov2(folder, ckpt)
    if not ckpt.class_token:
        return _write_siglip(folder, ckpt)
    _check(ckpt, "ViT")
    return huggingface.write(folder, ckpt)


# The "hf" format, writing each family's model.
HF = dataclasses.replace(huggingface.FORMAT, write=write, writes_rope=True, writes_naflex=True, writes_eomt=True,
                         block_options=tuple(_BIASES))
