"""Writes a canonical `Checkpoint` as an original `.npz`, a timm `.safetensors` state dict, or
a Hugging Face transformers folder. Files are written atomically, one tensor in memory at a
time, in float32."""

import dataclasses
import json
import logging
import os
import zipfile

import numpy as np

from keras_vit.imagenet import imagenet_classes
from keras_vit.layers.transformer_block import LAYER_NORM_EPSILON
from keras_vit.weights import stems
from keras_vit.files import atomic_path
from keras_vit.weights.layouts import HF, TIMM
from keras_vit.weights.rules import convert
from keras_vit.weights.safetensors_io import write_safetensors

logger = logging.getLogger("keras_vit.weights")


def _float32(tensors):
    return {k: v.astype(np.float32) for k, v in tensors.items()}


def write_npz(path, ckpt):
    """The original layout: a `.npz` with flat '/'-joined keys, as `np.savez` writes it."""
    with atomic_path(path) as tmp, zipfile.ZipFile(tmp, "w", zipfile.ZIP_STORED, allowZip64=True) as zf:
        for key, tensor in ckpt.tensors.items():
            array = np.ascontiguousarray(tensor.load(), dtype=np.float32)
            with zf.open(key + ".npy", "w", force_zip64=array.nbytes > 2**31) as f:
                np.lib.format.write_array(f, array, allow_pickle=False)


def _theirs(ckpt, rules, layout):
    return convert(
        ckpt.tensors, rules, to_canonical=False, heads=ckpt.num_heads,
        keymaps=stems.keymaps(layout, to_canonical=False), what=f"export of {ckpt.path} to {layout}",
    )


def write_timm(path, ckpt):
    """A timm `VisionTransformer` state dict (`.safetensors`); a pre_logits layer is written
    as `pre_logits.fc.*`, as older timm versions named it."""
    write_safetensors(path, _float32(_theirs(ckpt, TIMM, "timm")), metadata={"format": "pt"})


def hf_config(ckpt, architecture):
    """The transformers `ViTConfig` of `ckpt` as a dict."""
    grid = ckpt.patch_grid
    size = grid[0] * ckpt.patch_size if grid[0] == grid[1] else [g * ckpt.patch_size for g in grid]
    config = {
        "architectures": [architecture],
        "model_type": "vit",
        "hidden_size": ckpt.hidden_dim,
        "num_hidden_layers": ckpt.depth,
        "num_attention_heads": ckpt.num_heads,
        "intermediate_size": ckpt.mlp_dim,
        "hidden_act": "gelu" if ckpt.approximate_gelu is False else "gelu_pytorch_tanh",
        "hidden_dropout_prob": 0.0,
        "attention_probs_dropout_prob": 0.0,
        "initializer_range": 0.02,
        "layer_norm_eps": ckpt.layer_norm_epsilon or LAYER_NORM_EPSILON,
        "image_size": size,
        "patch_size": ckpt.patch_size,
        "num_channels": ckpt.channels,
        "qkv_bias": True,
        "encoder_stride": ckpt.patch_size,
        "pooler_output_size": ckpt.representation_size or ckpt.hidden_dim,
        "pooler_act": "tanh",
        "torch_dtype": "float32",
    }
    if ckpt.classes:
        labels = [f"LABEL_{i}" for i in range(ckpt.classes)]
        if ckpt.classes == 1000:
            labels = [name for _, name in imagenet_classes()]
        config["id2label"] = {str(i): label for i, label in enumerate(labels)}
        config["label2id"] = {label: i for i, label in enumerate(labels)}
    return config


def hf_preprocessor_config(ckpt):
    """The transformers `ViTImageProcessor` settings for `ckpt`: bilinear resize to its
    resolution, then `(x / 255 - 0.5) / 0.5`, the [-1, 1] scaling of `preprocess_input`."""
    height, width = (g * ckpt.patch_size for g in ckpt.patch_grid)
    return {
        "image_processor_type": "ViTImageProcessor",
        "do_resize": True,
        "size": {"height": height, "width": width},
        "resample": 2,  # PIL.Image.BILINEAR
        "do_rescale": True,
        "rescale_factor": 1 / 255,
        "do_normalize": True,
        "image_mean": [0.5, 0.5, 0.5],
        "image_std": [0.5, 0.5, 0.5],
    }


def _write_json(path, data):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2)


def write_hf(folder, ckpt):
    """A transformers folder (`config.json`, `preprocessor_config.json`, `model.safetensors`)
    that `transformers.pipeline(..., model=folder)` runs as is: `ViTForImageClassification`
    with a head, else `ViTModel` (a pre_logits layer becomes its pooler). An all-zero head on a
    pre_logits layer (the ImageNet-21k files) is left out; a trained one cannot be expressed.
    The folder is written whole and swapped in when complete."""
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
    theirs = _theirs(ckpt, HF, "hf")
    if architecture == "ViTForImageClassification":
        theirs = {k if k.startswith("classifier.") else "vit." + k: v for k, v in theirs.items()}
    with atomic_path(folder) as tmp:
        os.makedirs(tmp)
        write_safetensors(os.path.join(tmp, "model.safetensors"), _float32(theirs), metadata={"format": "pt"})
        _write_json(os.path.join(tmp, "config.json"), hf_config(ckpt, architecture))
        _write_json(os.path.join(tmp, "preprocessor_config.json"), hf_preprocessor_config(ckpt))


WRITERS = {"npz": write_npz, "timm": write_timm, "hf": write_hf}
