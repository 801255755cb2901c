"""KerasHub presets of the plain-ViT families beyond the paper (SPEC section 7): DeiT
(`keras_hub.models.DeiTBackbone`, `DeiTImageClassifier`), DINOv2 (`DINOV2Backbone`), DINOv3
(`DINOV3Backbone`: rope, no key bias, a gated MLP's `gate_proj` / `up_proj` packed) and the
SigLIP image tower (`SigLIPVisionEncoder`, alone or as the `vision_encoder` of a
`SigLIPBackbone`, whose text tower is left out). Read only: a preset folder, a `.weights.h5`
or a `.keras` file, as for KerasHub's ViT (`formats.kerashub`).

Keys are the Keras layers' names, then `vars/<position>`. keras-hub prefixes a named model's
layers with its name (`dinov2_backbone_embeddings`), which is stripped. A layer's own weights
(tokens, position embeddings) are known only by position; `_Family.embedding_names` names them.
A DINOv2 preset keeps its position embeddings at `position_embedding_shape` (read here, with
that grid) beside a copy resized to `image_shape` (left out). The config gives heads,
LayerNorm epsilon, GELU flavour and resolution; a bare `.weights.h5` gives none of them.
"""

import dataclasses
from typing import Callable

import numpy as np

from keras_vit.weights.canonical import ATTN, BLOCK, DIST, LAYER_SCALE, MAP, MAP_ATTN, MLP, POSEMB, QKV, REG, Metadata
from keras_vit.weights.formats.base import Format
from keras_vit.weights.formats.common import config_pair
from keras_vit.weights.formats.kerashub import (
    check_classes, layer_rows, posemb_from_canonical, posemb_to_canonical, preset_configs,
)
from keras_vit.weights.lazy import LazyArray, concat
from keras_vit.weights.table import Row, Table, pairs
from keras_vit.weights.transforms import bias_to_heads, heads_to_bias, heads_of
from keras_vit.config.vit_config import ROPE_THETA

NORM = ("scale", "bias")
DROPPED = None  # an embedding variable keras_vit's model has no use for (a mask token, a resized copy)


def _attention_rows(canonical, theirs):
    """keras `MultiHeadAttention` at `theirs`: q / k / v and output, in the canonical layout already."""
    return sum((layer_rows(canonical + f"{n}/", theirs + f"{n}/") for n in QKV), ()) + layer_rows(
        canonical + "out/", theirs + "attention_output/"
    )


def _block_rows(block, norm1, attention, norm2, fc1, fc2):
    """One pre-norm transformer block at `block` (with `{i}`), its layers' names after it."""
    return (
        layer_rows(BLOCK + "LayerNorm_0/", block + norm1, NORM)
        + _attention_rows(ATTN, block + attention)
        + layer_rows(BLOCK + "LayerNorm_2/", block + norm2, NORM)
        + layer_rows(MLP + "Dense_0/", block + fc1)
        + layer_rows(MLP + "Dense_1/", block + fc2)
    )


def _dinov2_embedding_names(shapes):
    """Class token, mask token (`(1, D)`, if used), registers (`(1, R, D)`, if any), the
    position embeddings resized to `image_shape`, then those at `position_embedding_shape`."""
    middle = ["register_tokens" if len(s) == 3 else DROPPED for s in shapes[1:-2]]
    return ["cls_token", *middle, DROPPED, "position_embeddings"][: len(shapes)]


def _dinov3_embedding_names(shapes):
    """Class token, mask token (`(1, 1, D)`, if used), registers (`(1, R, D)`, if any)."""
    rest = ["register_tokens" if i == len(shapes) - 1 and (len(shapes) == 3 or s[1] > 1) else DROPPED
            for i, s in enumerate(shapes[1:], 1)]
    return ["cls_token", *rest]


def _dense_to_heads(arrays, heads):
    """A q / k / v `Dense` kernel `(D, D)` and bias `(D,)` -> `(D, heads, D // heads)`, `(heads, D // heads)`."""
    kernel, bias = arrays
    return [kernel.reshape(kernel.shape[0], heads_of(kernel, heads, "attention"), -1), *bias_to_heads([bias], heads)]


def _heads_to_dense(arrays, heads):
    kernel, bias = arrays
    return [kernel.reshape(kernel.shape[0], -1), *heads_to_bias([bias], heads)]


def _out_to_heads(arrays, heads):
    kernel = arrays[0]
    return [kernel.reshape(heads_of(kernel, heads, "attention"), -1, kernel.shape[1])]


def _heads_to_out(arrays, heads):
    return [arrays[0].reshape(-1, arrays[0].shape[-1])]


def _deit_embedding_names(shapes):
    """Mask token (if used), class and distillation tokens, position embeddings."""
    return [DROPPED] * (len(shapes) - 3) + ["class_token", "distillation_token", "position_embedding"]


def _siglip_embedding_names(shapes):
    """Only the token positions `0..N-1` (the position embedding is a layer of its own)."""
    return [DROPPED] * len(shapes)


def _deit_refusal(backbone, task):
    """Why keras_vit cannot run this DeiT exactly as keras-hub does, or None."""
    if task.get("pooling", "token") != "token":
        return (f"a DeiTImageClassifier with pooling={task['pooling']!r} (the mean of all tokens, class and "
                "distillation token included); keras_vit's head reads the class token (pooling='token')")
    if backbone.get("use_mha_bias") is False:
        return "a DeiTBackbone with use_mha_bias=False; keras_vit's attention has biases"
    return None


def _dinov3_refusal(backbone, task):
    """Why keras_vit cannot run this DINOv3 exactly as keras-hub does, or None."""
    if backbone.get("use_query_bias", True) != backbone.get("use_value_bias", True):
        return "a DINOV3Backbone with a bias on the queries or the values only; keras_vit's qkv_bias has both or none"
    expected = "silu" if backbone.get("use_gated_mlp") else "gelu"  # keras_vit's SwiGLU / exact GELU MLP
    if backbone.get("hidden_activation", "gelu") != expected:
        return f"a DINOV3Backbone with hidden_activation={backbone['hidden_activation']!r}; keras_vit runs {expected!r} there"
    return None


def _dinov3_tensors(tensors):
    """A zero key bias where the keys have none (`key_bias=False` drops it; with query / value
    biases only), a gated MLP's `gate_proj` and `up_proj` packed `[gate | value]` as `up_proj`."""
    for key in [k for k in tensors if k.endswith("/attention/q_proj/vars/1")]:
        k_bias = key.replace("/q_proj/", "/k_proj/")
        if k_bias not in tensors:
            tensors[k_bias] = LazyArray.wrap(np.zeros(tensors[key].shape, np.float32), "zero key bias")
    for key in [k for k in tensors if "/mlp/gate_proj/" in k]:
        up = key.replace("/gate_proj/", "/up_proj/")
        if up in tensors:  # else the table names the unmatched key
            tensors[up] = concat([tensors.pop(key), tensors[up]], axis=len(tensors[up].shape) - 1)
    return tensors


def _siglip_refusal(backbone, task):
    """Why keras_vit cannot run this SigLIP image tower exactly as keras-hub does, or None."""
    activation = backbone.get("intermediate_activation", "gelu_approximate")
    if activation not in ("gelu", "gelu_approximate"):
        return (f"a SigLIPVisionEncoder with intermediate_activation={activation!r}; "
                "keras_vit's MLP runs 'gelu' or 'gelu_approximate'")
    if backbone.get("layer_norm_epsilon", 1e-6) != 1e-6:
        return ("a SigLIPVisionEncoder with layer_norm_epsilon != 1e-6, whose final LayerNorm keeps 1e-6; "
                "keras_vit's LayerNorms share one epsilon")
    return None


DINOV2_BLOCK = "encoder/layers_{i}/"
DEIT_BLOCK = "deit_encoder/transformer_block_{i+1}/"
SIGLIP_BLOCK = "encoder_block_{i}/"

DINOV2_TABLE = Table(
    layer_rows("embedding/", "embeddings/patch_embeddings/projection/")
    + pairs(("cls", "embeddings/cls_token"), (POSEMB, "embeddings/position_embeddings"))
    + pairs((REG, "embeddings/register_tokens"), optional=True)
    + _block_rows(DINOV2_BLOCK, "norm1/", "attention/attention/", "norm2/", "mlp/fc1/", "mlp/fc2/")
    + pairs(*((LAYER_SCALE[j], DINOV2_BLOCK + f"layer_scale{j + 1}/vars/0") for j in (0, 1)))
    + layer_rows("Transformer/encoder_norm/", "layernorm/", NORM)
)

DINOV3_TABLE = Table(
    layer_rows("embedding/", "embeddings/patch_embeddings/projection/")
    + pairs(("cls", "embeddings/cls_token"))
    + pairs((REG, "embeddings/register_tokens"), optional=True)
    + layer_rows(BLOCK + "LayerNorm_0/", DINOV2_BLOCK + "norm1/", NORM)
    + tuple(Row((ATTN + f"{n}/kernel", ATTN + f"{n}/bias"), (DINOV2_BLOCK + f"attention/{t}_proj/vars/0",
                DINOV2_BLOCK + f"attention/{t}_proj/vars/1"), _dense_to_heads, _heads_to_dense)
            for n, t in zip(QKV, "qkv"))
    + (Row(ATTN + "out/kernel", DINOV2_BLOCK + "attention/o_proj/vars/0", _out_to_heads, _heads_to_out),)
    + pairs((ATTN + "out/bias", DINOV2_BLOCK + "attention/o_proj/vars/1"), optional=True)
    + layer_rows(BLOCK + "LayerNorm_2/", DINOV2_BLOCK + "norm2/", NORM)
    + pairs(*((LAYER_SCALE[j], DINOV2_BLOCK + f"layer_scale{j + 1}/vars/0") for j in (0, 1)))
    + pairs((MLP + "Dense_0/kernel", DINOV2_BLOCK + "mlp/up_proj/vars/0"),
            (MLP + "Dense_1/kernel", DINOV2_BLOCK + "mlp/down_proj/vars/0"))
    + pairs((MLP + "Dense_0/bias", DINOV2_BLOCK + "mlp/up_proj/vars/1"),
            (MLP + "Dense_1/bias", DINOV2_BLOCK + "mlp/down_proj/vars/1"), optional=True)
    + layer_rows("Transformer/encoder_norm/", "layernorm/", NORM)
)

DEIT_TABLE = Table(
    layer_rows("embedding/", "deit_patching_and_embedding/patch_embedding/")
    + pairs(
        ("cls", "deit_patching_and_embedding/class_token"),
        (DIST, "deit_patching_and_embedding/distillation_token"),
        (POSEMB, "deit_patching_and_embedding/position_embedding"),
    )
    + _block_rows(DEIT_BLOCK, "ln_1/", "mha/", "ln_2/", "mlp/dense/", "output_layer/output/")
    + layer_rows("Transformer/encoder_norm/", "deit_encoder/ln/", NORM)
    + layer_rows("head/", "predictions/", optional=True)
)

SIGLIP_TABLE = Table(
    layer_rows("embedding/", "embedding/patch_embedding/")
    + (Row(POSEMB, "embedding/position_embedding/vars/0", posemb_to_canonical, posemb_from_canonical),)
    + _block_rows(SIGLIP_BLOCK, "layer_norm1/", "self_attn/", "layer_norm2/", "mlp/fc1/", "mlp/fc2/")
    + layer_rows("Transformer/encoder_norm/", "post_layer_norm/", NORM)
    + pairs((MAP + "probe", "head/vars/0"))
    + _attention_rows(MAP_ATTN, "head/attention/")
    + layer_rows(MAP + "LayerNorm_0/", "head/layernorm/", NORM)
    + layer_rows(MAP + "MlpBlock_0/Dense_0/", "head/mlp/fc1/")
    + layer_rows(MAP + "MlpBlock_0/Dense_1/", "head/mlp/fc2/")
)


@dataclasses.dataclass(frozen=True)
class _Family:
    """`classes`: keras-hub's class names (`registered_name` without `keras_hub>`) of the
    backbone and of what holds it; `embedding`: the layer holding the tokens, `patches` the
    patch embedding's kernel under it and `marker` another of the model's layers (together
    they find the model in a file); `grid_from`: the config key of the resolution the
    position embeddings are for; `head`: the task's layers, kept beside the backbone's;
    `aliases`: `(theirs, table's)` spellings of a layer's path, the table knowing one;
    `activation`: the MLP's when the config names none; `refusal(backbone config, task
    config)`: why keras_vit cannot run the model exactly, or None."""

    name: str
    table: Table
    classes: tuple
    embedding: str
    patches: str
    marker: str
    embedding_names: Callable
    preprocessing: str
    grid_from: str = "image_shape"
    head: tuple = ()
    aliases: tuple = ()
    activation: str = "gelu"
    refusal: Callable = lambda backbone, task: None
    tensors: Callable = lambda tensors: tensors  # a last clean-up of the named tensors


DINOV2 = _Family("DINOv2", DINOV2_TABLE, ("DINOV2Backbone",), "embeddings", "patch_embeddings/projection/vars/0",
                 "layernorm", _dinov2_embedding_names, "dinov2", grid_from="position_embedding_shape",
                 aliases=(("/mlp/weights_in/", "/mlp/fc1/"), ("/mlp/weights_out/", "/mlp/fc2/")))  # SwiGLU
DINOV3 = _Family("DINOv3", DINOV3_TABLE, ("DINOV3Backbone",), "embeddings", "patch_embeddings/projection/vars/0",
                 "layernorm", _dinov3_embedding_names, "dinov3", refusal=_dinov3_refusal, tensors=_dinov3_tensors)
DEIT = _Family("DeiT", DEIT_TABLE, ("DeiTBackbone", "DeiTImageClassifier"), "deit_patching_and_embedding",
               "patch_embedding/vars/0", "deit_encoder", _deit_embedding_names, "deit", head=("predictions",),
               refusal=_deit_refusal)
SIGLIP = _Family("SigLIP", SIGLIP_TABLE, ("SigLIPVisionEncoder", "SigLIPBackbone"), "embedding",
                 "patch_embedding/vars/0", "post_layer_norm", _siglip_embedding_names, "siglip",
                 activation="gelu_approximate", refusal=_siglip_refusal)


def _root(family, tensors):
    """`(root, prefix)`: where the model's layers are in the file and the name prefix of
    its layers (`dinov2_backbone_`); None if the file holds no such model."""
    for key in tensors:
        if key.endswith("/" + family.patches):
            *outer, embedding = key[: -len(family.patches) - 1].split("/")
            root, prefix = "".join(p + "/" for p in outer), embedding[: -len(family.embedding)]
            if embedding.endswith(family.embedding) and any(
                k.startswith(f"{root}{prefix}{family.marker}/") for k in tensors
            ):
                return root, prefix
    return None


def _detector(family):
    """A `.weights.h5` / `.keras` / preset of `family`: by its config's class, else by its layers."""

    def detect(raw):
        if raw.container not in ("keras_h5", "keras"):
            return False
        config = raw.meta.get("config") or {}
        if "registered_name" in config:
            return str(config["registered_name"]).removeprefix("keras_hub>") in family.classes
        return _root(family, raw.tensors) is not None

    return detect


def _backbone_config(raw):
    """The config of the image model (a SigLIPBackbone's `vision_encoder`), and the task's."""
    backbone, task = preset_configs(raw)
    if "vision_encoder" not in backbone:
        return backbone, task
    vision = backbone["vision_encoder"]
    vision = vision.get("config") if isinstance(vision, dict) else None
    if not isinstance(vision, dict):
        raise ValueError(f"{raw.path}: the SigLIPBackbone's vision_encoder config is not a JSON object ({{...}}).")
    return vision, task


def _preparer(family):
    def prepare(raw):
        """The model's variables under the names of `family.table`: the file, outer model and
        layer-name prefix stripped, the embedding layer's variables named."""
        found = _root(family, raw.tensors)
        if found is None:
            raise ValueError(
                f"{raw.path}: a KerasHub {family.name} config, but no {family.embedding}/{family.patches} weights."
            )
        backbone, task = _backbone_config(raw)
        problem = family.refusal(backbone, task)
        if problem:
            raise ValueError(f"{raw.path}: {problem}, so it cannot hold these weights.")
        root, prefix = found
        tensors, embedding = {}, []
        for key, value in raw.tensors.items():
            if key.startswith(root):
                key = key[len(root):]
            else:  # a task's layer: in a preset folder, under its file's name
                key = key.split("/", 1)[1] if key.split("/", 1)[0].endswith(".weights.h5") else key
                if key.split("/", 1)[0] not in family.head:
                    continue  # a SigLIPBackbone's text tower and logit scale
            key = "/".join(part.removeprefix(prefix) for part in key.split("/"))
            for theirs, ours in family.aliases:
                key = key.replace(theirs, ours)
            if key.startswith(family.embedding + "/vars/"):
                embedding.append((int(key.rsplit("/", 1)[1]), value))
            else:
                tensors[key] = value
        values = [value for _, value in sorted(embedding, key=lambda pair: pair[0])]
        for name, value in zip(family.embedding_names([v.shape for v in values]), values):
            if name is not DROPPED:
                tensors[f"{family.embedding}/{name}"] = value
        check_classes(raw, task, tensors.get("predictions/vars/0"))
        return family.tensors(tensors)

    return prepare


def _metadata(family):
    def metadata(raw, tensors):
        backbone, _ = _backbone_config(raw)
        grid = None
        if family.grid_from in backbone and "patch_size" in backbone:
            patch = config_pair(backbone["patch_size"], "patch_size", raw.path)
            image = config_pair(backbone[family.grid_from], family.grid_from, raw.path, length=3)
            grid = tuple(s // p for s, p in zip(image, patch))
        rope = family is DINOV3
        return Metadata(
            approximate_gelu=backbone.get("intermediate_activation", family.activation) == "gelu_approximate",
            num_heads=backbone.get("num_heads"),
            grid=grid,
            layer_norm_epsilon=backbone.get("layer_norm_eps" if rope else "layer_norm_epsilon", 1e-5 if rope else 1e-6),
            pooling="token" if "predictions/vars/0" in tensors else None,
            preprocessing=family.preprocessing,
            interpolation="bicubic_antialias" if backbone.get("antialias_in_interpolation") else None,
            rope_theta=backbone.get("rope_theta", ROPE_THETA) if rope else None,
            key_bias=bool(backbone.get("use_key_bias", True)) if rope else None,
            depth=backbone.get("num_layers"),
        )

    return metadata


# KerasHub's DINOv2 resizes by `ops.image.resize(interpolation="bicubic")` (PyTorch's on that
# backend; antialiased where its config says); its DeiT and SigLIP do not resize: their presets
# are transformers' weights, resized here as transformers does.
FORMATS = [
    Format(name=f"kerashub_{family.name.lower()}", table=family.table, detect=_detector(family),
           prepare=_preparer(family), metadata=_metadata(family), interpolation="bicubic")
    for family in (DEIT, DINOV2, DINOV3, SIGLIP)
]
