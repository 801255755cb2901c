"""Parameter-efficient fine-tuning: LoRA on the encoder's projections, and the linear probe.

Both train only a few weights of a (pretrained) ViT and the classification head; everything
else is frozen (its variables made non-trainable). LoRA is Keras' own `Dense.enable_lora`
(a low-rank update `A @ B * alpha / rank` added to the frozen kernel) on the `Linear`
layers named in `targets`:

    lora.enable(model, rank=8, targets=("qkv", "out"))   # train with model.fit ...
    lora.save(model, "lora.npz")                           # only the A and B matrices
    base = keras_vit.ViTB16(weights=..., classes=...)      # later: the same base model
    lora.load(base, "lora.npz")                            # LoRA enabled, A and B restored
    plain = lora.merged(base)                              # A @ B folded into the kernels

A model saved with `model.save` has the update folded into its kernels already (Keras'
`Dense.save_own_variables`), so `best.keras` of a LoRA run is a plain ViT.
"""

import json
import zipfile

import keras
import numpy as np

from keras_vit.files import atomic_path, regular_file
from keras_vit.layers.linear import Linear
from keras_vit.training.config import LORA_TARGETS, parse_lora_targets as parse_targets

# Projection name (`config.LORA_TARGETS`) -> the `Linear` layers of each encoder block it covers.
TARGETS = dict(zip(LORA_TARGETS, (("qkv",), ("out",), ("dense_0", "dense_1"))))
HEAD_LAYERS = ("head", "pre_logits")


def _target_layers(model, targets):
    wanted = {layer for name in parse_targets(targets) for layer in TARGETS[name]}
    encoder = model.get_layer("encoder")
    return [layer for layer in encoder._flatten_layers() if isinstance(layer, Linear) and layer.name in wanted]


def freeze_all_but_head(model, keep=()):
    """Makes every variable of `model` non-trainable except the head's and those in `keep`."""
    head = {id(v) for name in HEAD_LAYERS if name in (lay.name for lay in model.layers) for v in model.get_layer(name).weights}
    kept = head | {id(v) for v in keep}
    if not head:
        raise ValueError(f"Model {model.name!r} has no classification head ('head' layer) to train.")
    for variable in model.weights:
        variable.trainable = id(variable) in kept


def enable(model, rank, targets=("qkv", "out"), alpha=None):
    """Enables LoRA of `rank` (scale `alpha / rank`, alpha default `rank`) on the encoder's
    projections `targets` and freezes all other weights but the head's."""
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
        raise ValueError(f"lora_rank={rank!r} must be a whole number >= 1.")
    layers = _target_layers(model, targets)
    for layer in layers:
        layer.enable_lora(rank, lora_alpha=alpha)
    freeze_all_but_head(model, keep=[v for layer in layers for v in (layer.lora_kernel_a, layer.lora_kernel_b)])
    model._lora = {"rank": rank, "alpha": layers[0].lora_alpha, "targets": list(parse_targets(targets))}
    return model


def _lora_layers(model):
    return [layer for layer in model._flatten_layers() if isinstance(layer, Linear) and layer.lora_enabled]


def save(model, path):
    """Writes the LoRA matrices (and the head, which LoRA fine-tuning trains too) of `model`
    to an `.npz` file with the settings `load` needs (written under a temporary name, then renamed)."""
    layers = _lora_layers(model)
    if not layers:
        raise ValueError(f"Model {model.name!r} has no LoRA layers (lora.enable first).")
    arrays = {v.path: keras.ops.convert_to_numpy(v) for lay in layers for v in (lay.lora_kernel_a, lay.lora_kernel_b)}
    arrays.update({v.path: keras.ops.convert_to_numpy(v) for v in model.get_layer("head").weights})
    settings = getattr(model, "_lora", None) or {"rank": layers[0].lora_rank, "alpha": layers[0].lora_alpha}
    with atomic_path(path) as tmp, open(tmp, "wb") as handle:
        np.savez(handle, __settings__=json.dumps(settings), **arrays)


def load(model, path):
    """Enables LoRA on `model` (the base model the file was trained from) as recorded in the
    `.npz` file written by `save`, and assigns its matrices and head."""
    try:
        with np.load(regular_file(path, "as LoRA matrices")) as stored:
            settings = json.loads(str(stored["__settings__"]))
            arrays = {key: stored[key] for key in stored.files if key != "__settings__"}
    except (OSError, EOFError, ValueError, KeyError, zipfile.BadZipFile) as error:
        raise ValueError(f"{path} is not a LoRA file written by keras_vit.training.lora.save ({error}).") from None
    enable(model, settings["rank"], settings.get("targets", tuple(TARGETS)), settings["alpha"])
    variables = {v.path: v for v in model.weights}
    missing = sorted(set(arrays) - set(variables))
    if missing:
        raise ValueError(f"{path} does not fit model {model.name!r}: it has no variables {missing[:3]}.")
    for key, value in arrays.items():
        if tuple(variables[key].shape) != value.shape:
            raise ValueError(f"{path} does not fit model {model.name!r}: {key} is {value.shape}, "
                             f"the model's {tuple(variables[key].shape)}.")
        variables[key].assign(value)
    return model


def merged(model):
    """A plain copy of `model` (no LoRA variables, all trainable) whose kernels hold
    `kernel + A @ B * alpha / rank`."""
    copy = keras.models.clone_model(model)  # the layers' configs have no LoRA: plain Linear layers
    values = {v.path: v for v in model.weights}
    for layer in _lora_layers(model):
        values[layer._kernel.path] = layer.kernel  # Dense.kernel: the kernel with the update added
    for variable in copy.weights:
        variable.assign(keras.ops.convert_to_numpy(values[variable.path]))
        variable.trainable = True
    return copy


def apply_config(config, model):
    """What a `TrainConfig` asks for: LoRA (`lora_rank`) or the linear probe (`linear_probe`)."""
    if config.lora_rank:
        enable(model, config.lora_rank, config.lora_targets)
    elif config.linear_probe:
        freeze_all_but_head(model)
