"""Hugging Face transformers' ViT (`ViTModel`, `ViTForImageClassification`): a folder with
`config.json` and single or sharded weights, or a weights file with its `config.json` beside
it. Read: the `vit.` prefix, transformers-5 key names, `qkv_bias=False`; `config.json` gives
the GELU, head count, patch grid and LayerNorm epsilon. Written as a folder that
`transformers.pipeline("image-classification", model=folder)` runs as is."""

import dataclasses
import logging
import os

import numpy as np

from keras_vit.variants import LAYER_NORM_EPSILON
from keras_vit.utils.files import atomic_path, write_json
from keras_vit.preprocessing import preprocessing
from keras_vit.weights import containers
from keras_vit.weights.canonical import ATTN, QKV, Metadata
from keras_vit.weights.formats.base import Format
from keras_vit.weights.formats.common import config_pair, torch_rows
from keras_vit.weights.lazy import LazyArray
from keras_vit.weights.table import Row, Table, Template
from keras_vit.weights.transforms import heads_to_linear_and_bias, linear_and_bias_to_heads

logger = logging.getLogger("keras_vit.weights")
TANH_GELU_ACTS = ("gelu_new", "gelu_pytorch_tanh", "gelu_fast", "gelu_python_tanh")
LAYER = "encoder.layer.{i}."

TABLE = Table(
    torch_rows(
        "embeddings.patch_embeddings.projection.", "embeddings.cls_token", "embeddings.position_embeddings",
        LAYER + "layernorm_before.", LAYER + "layernorm_after.", LAYER + "attention.output.dense.",
        LAYER + "intermediate.dense.", LAYER + "output.dense.", "layernorm.", "pooler.dense.", "classifier.",
    )
    + tuple(
        Row(
            (ATTN + f"{n}/kernel", ATTN + f"{n}/bias"),
            (LAYER + f"attention.attention.{n}.weight", LAYER + f"attention.attention.{n}.bias"),
            linear_and_bias_to_heads,
            heads_to_linear_and_bias,
        )
        for n in QKV
    )
)

# transformers 5 state dicts: their names (right) of the names above (left); PEFT module names too (`lora.layouts`).
V5_MODULES = (
    ("attention.attention.query", "attention.q_proj"),
    ("attention.attention.key", "attention.k_proj"),
    ("attention.attention.value", "attention.v_proj"),
    ("attention.output.dense", "attention.o_proj"),
    ("intermediate.dense", "mlp.fc1"),
    ("output.dense", "mlp.fc2"),
    ("layernorm_before", "layernorm_before"),
    ("layernorm_after", "layernorm_after"),
)
V5_NAMES = Table(
    tuple(
        Row(LAYER + f"{ours}.{p}", f"layers.{{i}}.{theirs}.{p}")
        for ours, theirs in V5_MODULES
        for p in ("weight", "bias")
    ),
    dense={},
)
_QKV_WEIGHT = tuple(Template(LAYER + f"attention.attention.{n}.weight") for n in QKV)


def detect(raw):
    return any("embeddings.patch_embeddings" in k for k in raw.tensors)


def _config(raw):
    return raw.meta.get("config") or {}


def prepare(raw):
    """Strips the `vit.` prefix, renames transformers-5 keys, fills zero q/k/v biases for
    `qkv_bias=False`."""
    config = _config(raw)
    model_type = config.get("model_type", "vit")
    if model_type != "vit":
        raise ValueError(
            f"{raw.path}: a Hugging Face {model_type!r} model; keras_vit loads model_type 'vit' "
            "(ViTModel, ViTForImageClassification)."
        )
    tensors = V5_NAMES.rename({k[len("vit."):] if k.startswith("vit.") else k: v for k, v in raw.tensors.items()})
    if config.get("qkv_bias") is False:
        for key in [k for k in tensors if any(t.match(k) for t in _QKV_WEIGHT)]:
            width = tensors[key].shape[0]
            tensors[key[: -len("weight")] + "bias"] = LazyArray.wrap(np.zeros(width, np.float32), "qkv_bias=False")
    return tensors


def gelu(config, default="gelu"):
    """Whether `config.json`'s `hidden_act` (`default`, its config class's, where it records
    none) is the tanh GELU."""
    act = config.get("hidden_act", default)
    if act in TANH_GELU_ACTS:
        return True
    if act == "gelu":
        return False
    raise ValueError(f"Hugging Face config hidden_act={act!r}: keras_vit's ViT supports GELU (exact or tanh).")


def config_grid(config, path):
    """The patch grid `config.json`'s `image_size` / `patch_size` give (None unless it records
    both); a one-line ValueError where either is not a whole number >= 1 (or a pair of them)."""
    if "image_size" not in config or "patch_size" not in config:
        return None
    size = config_pair(config["image_size"], "image_size", path)
    patch = config_pair(config["patch_size"], "patch_size", path)
    return tuple(s // p for s, p in zip(size, patch))


def metadata(raw, tensors):
    config = _config(raw)
    return Metadata(
        approximate_gelu=gelu(config),
        num_heads=config.get("num_attention_heads"),
        grid=config_grid(config, raw.path),
        layer_norm_epsilon=config.get("layer_norm_eps"),
        depth=config.get("num_hidden_layers"),
    )


def common_config(ckpt, architecture, model_type):
    """The `config.json` entries every transformers ViT family shares, and the labels of a head."""
    from keras_vit.data.imagenet import LABELS

    grid = ckpt.patch_grid
    size = grid[0] * ckpt.patch_size if grid[0] == grid[1] else [g * ckpt.patch_size for g in grid]
    config = {
        "architectures": [architecture],
        "model_type": model_type,
        "hidden_size": ckpt.hidden_dim,
        "num_hidden_layers": ckpt.depth,
        "num_attention_heads": ckpt.num_heads,
        "hidden_act": "gelu" if ckpt.approximate_gelu is False else "gelu_pytorch_tanh",
        "layer_norm_eps": ckpt.layer_norm_epsilon or LAYER_NORM_EPSILON,
        "image_size": size,
        "patch_size": ckpt.patch_size,
        "num_channels": ckpt.channels,
        "torch_dtype": "float32",
    }
    if ckpt.classes:
        labels = [f"LABEL_{i}" for i in range(ckpt.classes)]
        if ckpt.classes in LABELS:  # ImageNet, ImageNet-21k
            labels = [name for _, name in LABELS[ckpt.classes]()]
        config["id2label"] = {str(i): label for i, label in enumerate(labels)}
        config["label2id"] = {label: i for i, label in enumerate(labels)}
    return config


def hf_config(ckpt, architecture, model_type="vit"):
    """The transformers `ViTConfig` (or `DeiTConfig`, the same fields) of `ckpt` as a dict."""
    return {
        **common_config(ckpt, architecture, model_type),
        "intermediate_size": ckpt.mlp_dim,
        "hidden_dropout_prob": 0.0,
        "attention_probs_dropout_prob": 0.0,
        "initializer_range": 0.02,
        "qkv_bias": True,
        "encoder_stride": ckpt.patch_size,
        "pooler_output_size": ckpt.representation_size or ckpt.hidden_dim,
        "pooler_act": "tanh",
    }


# PIL's resampling codes, as transformers' image processors record them.
RESAMPLE = {"bilinear": 2, "bicubic": 3}


def hf_preprocessor_config(ckpt, processor="ViTImageProcessor"):
    """The transformers image processor settings for `ckpt`: resize to its resolution with its
    preprocessing's interpolation, then `(x / 255 - mean) / std` with its mean / std
    (`keras_vit.preprocessing`; the paper's [-1, 1] by default)."""
    spec = preprocessing(ckpt.preprocessing)
    height, width = (g * ckpt.patch_size for g in ckpt.patch_grid)
    return {
        "image_processor_type": processor,
        "do_resize": True,
        "size": {"height": height, "width": width},
        "resample": RESAMPLE[spec.interpolation],
        "do_rescale": True,
        "rescale_factor": 1 / 255,
        "do_normalize": True,
        "image_mean": list(spec.mean),
        "image_std": list(spec.std),
    }


def write(folder, ckpt):
    """A transformers folder (`config.json`, `preprocessor_config.json`, `model.safetensors`):
    `ViTForImageClassification` with a head, else `ViTModel` (a pre_logits layer becomes its
    pooler). An all-zero head on a pre_logits layer (the ImageNet-21k files) is left out; a
    trained one cannot be expressed. The folder is written whole and swapped in when complete."""
    ckpt.require_class_token_head("hf")
    tensors = dict(ckpt.tensors)
    if "pre_logits/kernel" in tensors and "head/kernel" in tensors:
        if any(np.any(tensors[k].load()) for k in ("head/kernel", "head/bias")):
            raise ValueError(
                "A transformers ViT cannot hold both a pre_logits layer (its pooler) and a trained "
                "classifier on top of it; export format='npz' or 'timm' instead."
            )
        logger.info("Leaving out the all-zero head on pre_logits; writing a ViTModel with a pooler.")
        tensors = {k: v for k, v in tensors.items() if not k.startswith("head/")}
    ckpt = dataclasses.replace(ckpt, tensors=tensors)
    architecture = "ViTForImageClassification" if ckpt.classes else "ViTModel"
    theirs = FORMAT.from_canonical(ckpt.tensors, ckpt.num_heads, f"export of {ckpt.path} to hf")
    if architecture == "ViTForImageClassification":
        theirs = {k if k.startswith("classifier.") else "vit." + k: v for k, v in theirs.items()}
    write_folder(folder, theirs, hf_config(ckpt, architecture), hf_preprocessor_config(ckpt))


def write_folder(folder, tensors, config, preprocessor):
    """A transformers folder: `model.safetensors` (float32 `tensors`), `config.json` and
    `preprocessor_config.json`, written whole and swapped in when complete."""
    with atomic_path(folder) as tmp:
        os.makedirs(tmp)
        containers.write_safetensors(
            os.path.join(tmp, "model.safetensors"), {k: v.astype(np.float32) for k, v in tensors.items()}, {"format": "pt"}
        )
        write_json(os.path.join(tmp, "config.json"), config)
        write_json(os.path.join(tmp, "preprocessor_config.json"), preprocessor)


FORMAT = Format(
    name="hf",
    table=TABLE,
    detect=detect,
    prepare=prepare,
    metadata=metadata,
    write=write,
    folder=True,
    interpolation="bicubic",  # ViTEmbeddings.interpolate_pos_encoding
)
