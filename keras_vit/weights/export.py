"""Exports a keras_vit model's weights, and converts checkpoint files between formats."""

import os

import keras
import numpy as np

from keras_vit.architecture import ViTConfig
from keras_vit.weights import stems
from keras_vit.files import atomic_path, check_target
from keras_vit.weights.canonical import Checkpoint
from keras_vit.weights.layouts import KERAS
from keras_vit.weights.lazy import LazyArray
from keras_vit.weights.loader import PretrainedWeights, build_with_weights, weights_checkpoint
from keras_vit.weights.rules import convert
from keras_vit.weights.writers import WRITERS

FORMATS = (*WRITERS, "keras")


def model_checkpoint(model):
    """The weights of a keras_vit Vision Transformer as a canonical `Checkpoint`."""
    try:
        encoder = model.get_layer("encoder")
        grid = model.get_layer("posembed_input").grid_size
    except ValueError:
        raise ValueError(
            f"Model {model.name!r} is not a keras_vit Vision Transformer (it needs the layers "
            "'embedding', 'posembed_input' and 'encoder')."
        ) from None
    tensors = {
        v.path: LazyArray(
            v.shape, np.float32, lambda v=v: np.asarray(keras.ops.convert_to_numpy(v), np.float32), f"variable {v.path}"
        )
        for v in model.weights
    }
    tensors = convert(
        tensors, KERAS, to_canonical=True, heads=encoder.num_heads,
        keymaps=stems.keymaps("keras", to_canonical=True), what=f"model {model.name!r}",
    )
    return Checkpoint(
        model.name, "keras", tensors, encoder.approximate_gelu, encoder.num_heads, tuple(grid), encoder.layer_norm_epsilon
    )


def export(model, path, format="npz", overwrite=False):
    """Writes `model`'s weights for another implementation (refusing an existing `path`
    unless `overwrite`).

    - "npz": the original google-research/vision_transformer file (flat '/' keys);
    - "timm": a timm `VisionTransformer` state dict as `.safetensors`;
    - "hf": a Hugging Face transformers folder (`config.json`, `model.safetensors`) that
      `ViTForImageClassification.from_pretrained` (or `ViTModel`, without a head) loads; its
      `hidden_act` is the model's GELU ("gelu_pytorch_tanh" for the tanh approximation).
    """
    if format not in WRITERS:
        raise ValueError(f"Unknown export format {format!r}; expected one of {tuple(WRITERS)}.")
    check_target(path, overwrite=overwrite, folder=format == "hf")
    WRITERS[format](os.fspath(path), model_checkpoint(model))


def _output_format(dst):
    if dst.endswith(".npz"):
        return "npz"
    if dst.endswith(".safetensors"):
        return "timm"
    if dst.endswith((".keras", ".weights.h5")):
        return "keras"
    if os.path.isdir(dst) or not os.path.splitext(dst)[1]:
        return "hf"
    raise ValueError(
        f"Cannot tell the output format from {dst!r}; pass format= one of {FORMATS} "
        "(.npz -> npz, .safetensors -> timm, .keras / .weights.h5 -> keras, a folder -> hf)."
    )


def convert_checkpoint(src, dst, format=None, num_heads=None, overwrite=False):
    """Converts the checkpoint `src` (a path or a named checkpoint) to `dst`, refusing an
    existing `dst` unless `overwrite`. The output format is `format`, else taken from `dst`'s
    name. `num_heads` is needed only for sources that do not record it (timm, `.weights.h5`)
    when the standard variant's count would be wrong."""
    dst = os.fspath(dst)
    format = format or _output_format(dst)
    if format not in FORMATS:
        raise ValueError(f"Unknown format {format!r}; expected one of {FORMATS}.")
    check_target(dst, overwrite=overwrite, folder=format == "hf")
    ckpt = weights_checkpoint(src, num_heads=num_heads)
    if format != "keras":
        WRITERS[format](dst, ckpt)
        return
    if ckpt.stem is not None:
        raise ValueError(
            f"{ckpt.path} has a {ckpt.stem.name} stem: build the hybrid model with weights=... "
            "and save it with model.save() instead."
        )
    config = ViTConfig(**ckpt.architecture(), include_top=ckpt.classes is not None, classes=ckpt.classes or 1000)
    model = build_with_weights(config, PretrainedWeights(ckpt))
    suffix = ".weights.h5" if dst.endswith(".weights.h5") else ".keras"
    with atomic_path(dst) as tmp:
        if suffix == ".keras":
            model.save(tmp)
        else:
            model.save_weights(tmp)
