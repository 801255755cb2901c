"""Reading the text tower of a transformers folder: `CLIPModel`, `CLIPTextModelWithProjection`,
`SiglipModel` (SigLIP and the fixed-resolution SigLIP 2), `SiglipTextModel`, `Siglip2Model`,
`Siglip2TextModel`, `MetaClip2Model`, `MetaClip2TextModelWithProjection`; or of an OpenCLIP folder (`keras_vit.text.open_clip`). The tensors come through `keras_vit.weights.containers` (safetensors or
PyTorch files, sharded or not); no Keras until they are assigned."""

import dataclasses
import os

import numpy as np

from keras_vit.text import open_clip
from keras_vit.text.config import text_config
from keras_vit.weights.containers import read_folder

# config.json's model_type -> (family, holds an image tower too)
MODEL_TYPES = {"clip": ("clip", True), "clip_text_model": ("clip", False), "siglip": ("siglip", True),
               "siglip_text_model": ("siglip", False), "siglip2": ("siglip2", True),
               "siglip2_text_model": ("siglip2", False), "metaclip_2": ("clip", True),
               "metaclip_2_text_model": ("clip", False)}
# CLIP-family models pooled at `eos_token_id` whatever it is (not OpenAI CLIP's legacy argmax for id 2)
EOS_POOLED = ("metaclip_2", "metaclip_2_text_model")
LAYER = "encoder.layers.{i}."


@dataclasses.dataclass
class TextTower:
    """A folder's text tower: its `TextConfig`, its tensors under transformers' names without
    the `text_model.` prefix (as NumPy arrays on first use), and the pair's `logit_scale` /
    `logit_bias` (None where the folder has none); `tokenizer`: the one its reader made (OpenCLIP's),
    else None (the family's, from the folder's files)."""

    path: str
    config: object
    tensors: dict
    logit_scale: object = None
    logit_bias: object = None
    has_image_tower: bool = False
    tokenizer: object = None


def read_text_tower(folder):
    """The `TextTower` of the transformers folder `folder`; a folder with an image tower only
    is refused in one line (ValueError)."""
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"No model folder at {folder}.")
    raw = read_folder(folder)
    config = raw.meta.get("config") or {}
    kind = config.get("model_type")
    if kind not in MODEL_TYPES and open_clip.is_open_clip(raw.tensors):
        settings, tensors, scale, bias, tokenizer = open_clip.read(folder, raw.tensors, raw.meta)
        return TextTower(folder, settings, tensors, scale, bias, any(k.startswith("visual.") for k in raw.tensors),
                         tokenizer)
    if kind not in MODEL_TYPES:
        raise ValueError(f"{folder}: config.json's model_type is {kind!r}, which has no text tower keras_vit reads "
                         f"(expected one of {', '.join(MODEL_TYPES)}); for an image tower alone use "
                         "keras_vit.from_checkpoint.")
    family, pair = MODEL_TYPES[kind]
    tensors = {key.removeprefix("text_model."): value for key, value in raw.tensors.items()
               if not key.startswith(("vision_model.", "visual_projection."))}
    if not any(key.startswith("embeddings.token_embedding") for key in tensors):
        raise ValueError(f"{folder}: no text tower (text_model.* weights) in this {kind} folder; for its image tower "
                         "alone use keras_vit.from_checkpoint.")
    text = config.get("text_config", {}) if pair else config
    settings = text_config(family, text, config.get("projection_dim") if pair else None, os.path.join(folder, "config.json"),
                           legacy_argmax=kind not in EOS_POOLED)
    held = {int(key.split(".")[2]) for key in tensors if key.startswith("encoder.layers.")}
    if held != set(range(settings.depth)):
        count = len(held) if held == set(range(len(held))) else f"blocks {sorted(held)}"
        raise ValueError(f"{folder}: its config.json declares {settings.depth} text blocks but its tensors hold {count}; "
                         "expected a configuration that matches its weights.")
    scale, bias = (tensors.pop(name, None) for name in ("logit_scale", "logit_bias"))
    return TextTower(folder, settings, tensors, scale, bias, pair)


def _linear(tensors, name):
    """`(kernel (in, out), bias or None)` of the torch Linear `name`."""
    bias = tensors.get(name + ".bias")
    return np.asarray(tensors[name + ".weight"].load()).T, None if bias is None else np.asarray(bias.load())


def _norm(tensors, name):
    return [np.asarray(tensors[name + suffix].load()) for suffix in (".weight", ".bias")]


def keras_weights(tower):
    """`{keras layer path: [values in the layer's variable order]}` of `tower`'s tensors: q / k / v
    fused into the `qkv` kernel `[q | k | v]`, torch's `(out, in)` Linear weights transposed."""
    tensors, config = tower.tensors, tower.config
    head = "text_projection" if config.family == "clip" else "head"
    missing = [key for key in ("embeddings.token_embedding.weight", "embeddings.position_embedding.weight",
                               "final_layer_norm.weight", head + ".weight") if key not in tensors]
    if missing:
        raise ValueError(f"{tower.path}: the text tower lacks {', '.join(missing)}.")
    out = {"embedding": [np.asarray(tensors["embeddings.token_embedding.weight"].load()),
                         np.asarray(tensors["embeddings.position_embedding.weight"].load())],
           "encoder/encoder_norm": _norm(tensors, "final_layer_norm")}
    for i in range(config.depth):
        layer, block = LAYER.format(i=i), f"encoder/encoderblock_{i}/"
        q, k, v = (_linear(tensors, layer + f"self_attn.{n}_proj") for n in "qkv")
        out[block + "ln_1"] = _norm(tensors, layer + "layer_norm1")
        out[block + "ln_2"] = _norm(tensors, layer + "layer_norm2")
        out[block + "attention/qkv"] = [np.concatenate([q[0], k[0], v[0]], 1), np.concatenate([q[1], k[1], v[1]])]
        out[block + "attention/out"] = list(_linear(tensors, layer + "self_attn.out_proj"))
        out[block + "mlp/dense_0"] = list(_linear(tensors, layer + "mlp.fc1"))
        out[block + "mlp/dense_1"] = list(_linear(tensors, layer + "mlp.fc2"))
    kernel, bias = _linear(tensors, head)
    out["projection"] = [kernel] if bias is None else [kernel, bias]
    return out


def assign(model, weights, path):
    """Assigns `keras_weights` to the text tower `model`, checking every shape."""
    layers = {"embedding": model.get_layer("embedding"), "projection": model.get_layer("projection")}
    encoder = model.get_layer("encoder")
    layers["encoder/encoder_norm"] = encoder.encoder_norm
    for i, block in enumerate(encoder.blocks):
        prefix = f"encoder/encoderblock_{i}/"
        layers.update({prefix + "ln_1": block.ln_1, prefix + "ln_2": block.ln_2,
                       prefix + "attention/qkv": block.attention.qkv, prefix + "attention/out": block.attention.out,
                       prefix + "mlp/dense_0": block.mlp.dense_0, prefix + "mlp/dense_1": block.mlp.dense_1})
    for name, values in weights.items():
        variables = layers[name].weights
        if [tuple(v.shape) for v in variables] != [value.shape for value in values]:
            raise ValueError(f"{path}: text weights {name} of shapes {[value.shape for value in values]} do not fit "
                             f"the model's {[tuple(v.shape) for v in variables]}.")
        for variable, value in zip(variables, values):
            variable.assign(value.astype(variable.dtype))
