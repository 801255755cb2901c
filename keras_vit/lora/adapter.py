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
    lora.save(model, "adapter", layout="peft")             # for PEFT on transformers' ViT
    lora.convert("lora.npz", "vit.lora.h5", "kerashub")    # a file in another layout

`load` reads every layout (`lora_layouts`): keras_vit's `.npz`, a PEFT adapter folder, a
KerasHub `.lora.h5`.

A model saved with `model.save` has the update folded into its kernels already (Keras'
`Dense.save_own_variables`), so `best.keras` of a LoRA run is a plain ViT.
"""

import json
import math
import numbers
import os
import zipfile

import keras
import numpy as np

from keras_vit.utils.files import atomic_path, parse_json, regular_file
from keras_vit.layers.linear import Linear
from keras_vit.lora.targets import LORA_TARGETS, parse_lora_targets as parse_targets
from keras_vit.weights.containers import read_npz

# Projection name (`config.LORA_TARGETS`) -> the `Linear` layers of each encoder block it covers.
TARGETS = dict(zip(LORA_TARGETS, (("qkv",), ("out",), ("dense_0", "dense_1"))))
HEAD_LAYERS = ("head", "pre_logits")
LAYOUTS = ("npz", "peft", "kerashub")  # keras_vit's own file, Hugging Face PEFT's folder, KerasHub's .lora.h5


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
    if alpha is not None and not _is_scale(alpha):
        raise ValueError(f"lora_alpha={alpha!r} must be a finite number > 0 (or None: the rank).")
    layers = _target_layers(model, targets)
    narrowest = min(min(layer.kernel.shape) for layer in layers)
    if rank > narrowest:
        raise ValueError(f"lora_rank={rank} must be in [1, {narrowest}] for model {model.name!r}: its narrowest "
                         f"projection among {', '.join(parse_targets(targets))} is {narrowest} wide.")
    for layer in layers:
        layer.enable_lora(rank, lora_alpha=alpha)
    freeze_all_but_head(model, keep=[v for layer in layers for v in (layer.lora_kernel_a, layer.lora_kernel_b)])
    model._lora = {"rank": rank, "alpha": layers[0].lora_alpha, "targets": list(parse_targets(targets))}
    return model


def _is_scale(value):
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value) and value > 0


def _is_count(value):
    return isinstance(value, numbers.Integral) and not isinstance(value, bool) and value >= 1


def check_settings(arrays, settings, path):
    """Raises ValueError (one line naming `path`) unless an adapter's settings are an object
    whose rank is a whole number >= 1 (the width of its A matrices), alpha a finite number > 0,
    targets names among `LORA_TARGETS`, num_heads and depth (where recorded) whole numbers >= 1."""
    if not isinstance(settings, dict):
        raise ValueError(f"{path}: its LoRA settings are a {type(settings).__name__}; expected a JSON object "
                         "with rank, alpha and targets.")
    rank, alpha = settings.get("rank"), settings.get("alpha")
    problems = [] if _is_count(rank) else [f"rank={rank!r} (expected a whole number >= 1)"]
    if not _is_scale(alpha):
        problems.append(f"alpha={alpha!r} (expected a finite number > 0)")
    for name in ("num_heads", "depth"):
        if name in settings and not _is_count(settings[name]):
            problems.append(f"{name}={settings[name]!r} (expected a whole number >= 1)")
    if "targets" in settings:
        targets = settings["targets"]
        if not (isinstance(targets, list) and all(isinstance(t, str) for t in targets)
                and targets and set(targets) <= set(LORA_TARGETS)):
            problems.append(f"targets={targets!r} (expected a list of names among {', '.join(LORA_TARGETS)})")
    if not problems:
        widths = {value.shape[-1] for key, value in arrays.items() if key.endswith("lora_kernel_a") and value.ndim}
        if widths - {rank}:
            problems.append(f"rank={rank} but A matrices of rank {', '.join(map(str, sorted(widths)))}")
    if problems:
        raise ValueError(f"{path}: its LoRA settings record {'; '.join(problems)}.")


def _lora_layers(model):
    return [layer for layer in model._flatten_layers() if isinstance(layer, Linear) and layer.lora_enabled]


def adapter(model):
    """`(arrays, settings)` of `model`'s LoRA: its A and B matrices and the head (which LoRA
    fine-tuning trains too) by variable path; rank, alpha, targets, head count and depth."""
    layers = _lora_layers(model)
    if not layers:
        raise ValueError(f"Model {model.name!r} has no LoRA layers (lora.enable first).")
    arrays = {v.path: keras.ops.convert_to_numpy(v) for lay in layers for v in (lay.lora_kernel_a, lay.lora_kernel_b)}
    arrays.update({v.path: keras.ops.convert_to_numpy(v) for v in model.get_layer("head").weights})
    settings = dict(getattr(model, "_lora", None) or {"rank": layers[0].lora_rank, "alpha": layers[0].lora_alpha})
    encoder = model.get_layer("encoder")
    settings.update(num_heads=encoder.num_heads, depth=encoder.depth)
    return arrays, settings


def save(model, path, layout="npz"):
    """Writes `model`'s LoRA (`adapter`) to `path` in `layout` (`LAYOUTS`); for "kerashub",
    returns the calls that load it in KerasHub."""
    return write(path, *adapter(model), layout=layout)


def write(path, arrays, settings, layout="npz", source=None):
    """Writes an adapter's `(arrays, settings)` to `path` in `layout`: keras_vit's `.npz`, a
    PEFT folder, a KerasHub `.lora.h5` (see `lora_layouts`; returns the calls that load it).
    `source`: the adapter converted, named in errors (default `path`)."""
    from keras_vit.lora import layouts as lora_layouts

    if layout not in LAYOUTS:
        raise ValueError(f"layout={layout!r}; expected one of {LAYOUTS}.")
    if layout == "npz":
        with atomic_path(path) as tmp, open(tmp, "wb") as handle:
            np.savez(handle, __settings__=json.dumps(settings), **arrays)
    elif layout == "peft":
        lora_layouts.write_peft(os.fspath(path), arrays, settings)
    else:
        return lora_layouts.write_kerashub(os.fspath(path), arrays, settings, source)


def read(path):
    """`(arrays, settings)` of a LoRA file or folder in any of `LAYOUTS`."""
    from keras_vit.lora import layouts as lora_layouts

    path = os.fspath(path)
    if lora_layouts.is_peft(path):
        arrays, settings = lora_layouts.read_peft(path)
    elif path.endswith(lora_layouts.KERASHUB_SUFFIX):
        arrays, settings = lora_layouts.read_kerashub(path)
    else:
        arrays, settings = _read_npz(path)
    check_settings(arrays, settings, path)
    return arrays, settings


def _read_npz(path):
    """`(arrays, settings)` of keras_vit's `lora.npz`."""
    try:  # as checkpoints are read: declared sizes bounded, members inflated within the limit, CRC checked
        stored = read_npz(regular_file(path, "as LoRA matrices"))
        settings = parse_json(str(stored.pop("__settings__").load()))
        arrays = {key: tensor.load() for key, tensor in stored.items()}
    except (OSError, EOFError, ValueError, KeyError, zipfile.BadZipFile) as error:
        raise ValueError(f"{path} is not a LoRA file written by keras_vit.lora.adapter.save, a PEFT adapter folder "
                         f"or a KerasHub .lora.h5 file ({error}).") from None
    return arrays, settings


def convert(src, dst, layout, overwrite=False):
    """Writes the LoRA adapter `src` (any layout) to `dst` in `layout`, refusing an existing
    `dst` unless `overwrite`; no model needed. Returns what `write` does."""
    from keras_vit.utils.files import atomic_path, check_target

    check_target(dst, overwrite=overwrite, folder=layout == "peft", inputs=(os.fspath(src),))
    arrays, settings = read(src)
    with atomic_path(dst) as tmp:
        loading = write(tmp if layout != "npz" else tmp + ".npz", arrays, settings, layout, source=os.fspath(src))
        if layout == "npz":
            os.replace(tmp + ".npz", tmp)
    return loading


def load(model, path):
    """Enables LoRA on `model` (the base model the adapter was trained from) as recorded in the
    adapter `path` (any of `LAYOUTS`), and assigns its matrices and head."""
    arrays, settings = read(path)
    encoder = model.get_layer("encoder")
    for name in ("num_heads", "depth"):  # recorded by newer files, and by KerasHub's (depth)
        if settings.get(name, getattr(encoder, name)) != getattr(encoder, name):
            raise ValueError(f"{path} does not fit model {model.name!r}: its {name} is {settings[name]}, the "
                             f"model's {getattr(encoder, name)}.")
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
