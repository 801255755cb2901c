"""Hugging Face transformers folders of AIMv2 image towers (`Aimv2VisionModel`, or the
`vision_model` of an `Aimv2Model`; read only): RMSNorm everywhere, an RMSNorm of the patch
embeddings (`patch_norm`), q / k / v / out projections with a bias only where `qkv_bias`, a
SiLU-gated MLP (`mlp="swiglu"`, biased where `mlp_bias`), no class token, a learned position
table, or MAE's fixed sin-cos table in the native-resolution models (`is_native`:
`sincos_form="mae"`), and the attention-pooling head whose probe is the query itself
(`map_head="aimv2"`)."""

import numpy as np

from keras_vit.weights.canonical import ATTN, EMBEDDING_NORM, MAP, MAP_ATTN, POSEMB, QKV, Metadata
from keras_vit.weights.formats import hf_families, huggingface
from keras_vit.weights.formats.base import Format
from keras_vit.weights.formats.common import norm_rows, torch_rows
from keras_vit.weights.lazy import LazyArray, concat
from keras_vit.weights.table import Row, Table, pairs
from keras_vit.weights.transforms import (
    bias_to_heads, heads_to_bias, heads_to_linear, heads_to_linear_and_bias, heads_to_out, linear_and_bias_to_heads,
    linear_to_heads, out_to_heads,
)

LAYER = "encoder.layers.{i}."
MODEL_TYPES = ("aimv2", "aimv2_vision_model")


def _projection_rows(canonical, theirs, optional_bias=True):
    """A q / k / v projection: its kernel, and its bias where the file has one."""
    return (Row(canonical + "kernel", theirs + "weight", linear_to_heads, heads_to_linear),
            Row(canonical + "bias", theirs + "bias", bias_to_heads, heads_to_bias, optional=optional_bias))


TABLE = Table(
    tuple(row for row in torch_rows(
        "embeddings.patch_embed.", None, "(none)", LAYER + "rms_norm1.", LAYER + "rms_norm2.",
        LAYER + "attention.out_proj.", LAYER + "ffn.up_proj.", LAYER + "ffn.down_proj.", "rms_norm.", None, None,
    ) if row.canonical[0].text != POSEMB)
    + pairs((POSEMB, "embeddings.position_embedding.weight"), optional=True)
    + norm_rows(EMBEDDING_NORM, "embeddings.rms_norm.")
    + tuple(row for n, t in zip(QKV, "qkv") for row in _projection_rows(ATTN + n + "/", LAYER + f"attention.{t}_proj."))
    # The pooling head: the probe is the query; key / value (biases zero where `qkv_bias=False`) and the output.
    + pairs((MAP + "probe", "head.cls_token"), optional=True)
    + tuple(Row((MAP_ATTN + f"{n}/kernel", MAP_ATTN + f"{n}/bias"), (f"head.{t}_proj.weight", f"head.{t}_proj.bias"),
                linear_and_bias_to_heads, heads_to_linear_and_bias, optional=True) for n, t in (("key", "k"), ("value", "v")))
    + (Row(MAP_ATTN + "out/kernel", "head.output_proj.weight", out_to_heads, heads_to_out, optional=True),)
    + pairs((MAP_ATTN + "out/bias", "head.output_proj.bias"), optional=True)
)


def _config(raw):
    """The image tower's config: `config.json`, or an `Aimv2Model`'s `vision_config` (an object)."""
    config = raw.meta.get("config") or {}
    if config.get("model_type") != "aimv2":
        return config
    vision = config.get("vision_config", {})
    if not isinstance(vision, dict):
        raise ValueError(f"{raw.path}: its config's vision_config is a {type(vision).__name__}; expected a JSON "
                         "object ({...}) of the image tower's settings.")
    return vision


def detect(raw):
    """By `config.json`'s model_type, else (a bare weights file) by the patch embeddings' RMSNorm."""
    model_type = (raw.meta.get("config") or {}).get("model_type")
    if model_type is not None:
        return model_type in MODEL_TYPES
    return any(key.endswith("embeddings.rms_norm.weight") for key in raw.tensors)


def prepare(raw):
    """Strips `vision_model.` (leaving out an `Aimv2Model`'s text tower and projections), gives the
    position table its batch axis, packs each `gate_proj` and `up_proj` as the SwiGLU layer's
    `[gate | value]` (`ffn.up_proj`), and gives the head's key / value a zero bias where the
    model has none (`qkv_bias=False`)."""
    config = _config(raw)
    if config.get("hidden_act", "silu") != "silu":
        raise ValueError(f"{raw.path}: AIMv2 hidden_act={config['hidden_act']!r}; keras_vit's SwiGLU is SiLU-gated.")
    tensors = hf_families.strip_prefixes(raw, ("vision_model.",),
                                 drop=("text_model.", "visual_projection.", "text_projection.", "logit_scale"))
    key = "embeddings.position_embedding.weight"
    if key in tensors and len(tensors[key].shape) == 2:
        tensors[key] = tensors[key].reshape(1, *tensors[key].shape)
    for key in [k for k in tensors if ".ffn.gate_proj." in k]:
        up = key.replace(".gate_proj.", ".up_proj.")
        if up in tensors:  # else the table names the unmatched key
            tensors[up] = concat([tensors.pop(key), tensors[up]], axis=0)
    for name in ("head.k_proj.", "head.v_proj."):
        if name + "weight" in tensors and name + "bias" not in tensors:
            zeros = np.zeros(tensors[name + "weight"].shape[0], np.float32)
            tensors[name + "bias"] = LazyArray.wrap(zeros, "zero bias (qkv_bias=False)")
    return tensors


def metadata(raw, tensors):
    """What the config records: heads, grid, the RMSNorms' epsilon (`rms_norm_eps`, default 1e-5),
    MAE's sin-cos frequencies where the model is native-resolution (no position table)."""
    config = _config(raw)
    native = "embeddings.position_embedding.weight" not in tensors
    return Metadata(
        num_heads=config.get("num_attention_heads"),
        grid=huggingface.config_grid(config, raw.path),
        layer_norm_epsilon=config.get("rms_norm_eps", 1e-5),
        preprocessing="aimv2",
        sincos_form="mae" if native else None,
        depth=config.get("num_hidden_layers"),
    )


FORMAT = Format(name="hf_aimv2", table=TABLE, detect=detect, prepare=prepare, metadata=metadata)
