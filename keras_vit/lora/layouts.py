"""LoRA adapters in other libraries' layouts, converted exactly to and from keras_vit's own
(`lora.save`): the variable paths of the A and B matrices and the head, and the settings.

- "peft": Hugging Face PEFT's adapter folder (`adapter_config.json`,
  `adapter_model.safetensors`) for transformers' `ViTForImageClassification` of the same
  checkpoint (`keras_vit.weights.export(model, path, format="hf")`). keras_vit's fused `qkv`
  update becomes the updates of `q_proj`, `k_proj` and `v_proj` (one A, B's column thirds), the
  head becomes `classifier` (`modules_to_save`). Read: transformers-4 and -5 module names,
  `ViTModel` too (no `vit.` prefix, no head), `rank_pattern`, `alpha_pattern`, `use_rslora`;
  the q / k / v updates fuse into one `qkv` update of their summed rank.
- "kerashub": the `.lora.h5` file of KerasHub's `Backbone.save_lora_weights` for its
  `ViTBackbone`: the rank, and each LoRA layer's A and B under its index among the backbone's
  layers with weights. Its attention kernels are `(dim, heads, head_dim)` with B shared by
  the heads, so a `qkv` update of rank r is `heads * r` there (and back). It holds no head;
  KerasHub loads it after `enable_lora` on its layers at its rank (`kerashub_loading`).

Ranks differ between layers after a conversion; each layer is padded with zero rows and
columns to the largest, and every scale (`alpha / r`, `alpha / sqrt(r)`) is folded into B,
so the result is exact with one rank and `alpha = rank`.
"""

import json
import math
import numbers
import os
import re

import numpy as np

from keras_vit.utils.files import parse_json
from keras_vit.weights.formats.huggingface import V5_MODULES

BLOCK = "encoder/encoderblock_{i}/"
# keras_vit's LoRA layers in a block (lora.TARGETS) and transformers-5 ViT's modules.
PEFT_MODULES = {
    "attention/qkv": ("attention.q_proj", "attention.k_proj", "attention.v_proj"),
    "attention/out": ("attention.o_proj",),
    "mlp/dense_0": ("mlp.fc1",),
    "mlp/dense_1": ("mlp.fc2",),
}
TARGET_OF_LAYER = {"attention/qkv": "qkv", "attention/out": "out", "mlp/dense_0": "mlp", "mlp/dense_1": "mlp"}
PEFT_PREFIX = "base_model.model."
PEFT_CONFIG, PEFT_WEIGHTS = "adapter_config.json", "adapter_model.safetensors"
_LORA_KEY = re.compile(r"encoder/encoderblock_(\d+)/(attention/qkv|attention/out|mlp/dense_0|mlp/dense_1)/lora_kernel_a")


def _layers(arrays):
    """`{(block, layer): (A, B)}` of keras_vit's arrays."""
    found = {}
    for key in arrays:
        match = _LORA_KEY.fullmatch(key)
        if match:
            found[int(match.group(1)), match.group(2)] = (arrays[key], arrays[key[: -len("a")] + "b"])
    return found


def _from_layers(updates, head=None, **extra):
    """keras_vit's `(arrays, settings)` of `{(block, layer): (A, B, scale)}`: one rank (the
    largest, others padded with zeros), scales folded into B, alpha = rank; `extra` settings."""
    rank = max(a.shape[1] for a, _, _ in updates.values())
    arrays = {}
    for (block, layer), (a, b, scale) in sorted(updates.items()):
        pad = rank - a.shape[1]
        path = BLOCK.format(i=block) + layer + "/lora_kernel_"
        arrays[path + "a"] = np.pad(a, ((0, 0), (0, pad))).astype(np.float32)
        arrays[path + "b"] = np.pad(b * scale, ((0, pad), (0, 0))).astype(np.float32)
    arrays.update(head or {})
    targets = sorted({TARGET_OF_LAYER[layer] for _, layer in updates}, key=("qkv", "out", "mlp").index)
    return arrays, {"rank": rank, "alpha": rank, "targets": targets, **extra}


def _add(updates, block, layer, part, a, b, path):
    """Adds the update `a @ b` (scale folded in) of `layer` to `updates`; q, k and v (`part` 0,
    1, 2 of `qkv`) are stacked along the rank, each B in its own column third."""
    if layer == "attention/qkv":
        width = b.shape[1]
        b = np.pad(b, ((0, 0), (part * width, (2 - part) * width)))
        if (block, layer) in updates:
            a0, b0, _ = updates[block, layer]
            if b0.shape[1] != b.shape[1] or a0.shape[0] != a.shape[0]:
                raise ValueError(f"{path}: the q / k / v updates of layer {block} have different sizes.")
            a, b = np.concatenate([a0, a], 1), np.concatenate([b0, b], 0)
    updates[block, layer] = (a, b, 1.0)


def _depth(arrays, settings):
    return settings.get("depth") or 1 + max(block for block, _ in _layers(arrays))


# ----------------------------------------------------------------------------------- PEFT


def to_peft(arrays, settings):
    """`(tensors, config)` of PEFT's adapter for transformers' `ViTForImageClassification`."""
    tensors, modules = {}, set()
    for (block, layer), (a, b) in sorted(_layers(arrays).items()):
        names = PEFT_MODULES[layer]
        width = b.shape[1] // len(names)
        for j, name in enumerate(names):
            key = f"{PEFT_PREFIX}vit.layers.{block}.{name}"
            tensors[key + ".lora_A.weight"] = np.ascontiguousarray(a.T)
            tensors[key + ".lora_B.weight"] = np.ascontiguousarray(b[:, j * width : (j + 1) * width].T)
            modules.add(name)
    if "head/kernel" in arrays:
        tensors[PEFT_PREFIX + "classifier.weight"] = np.ascontiguousarray(arrays["head/kernel"].T)
        tensors[PEFT_PREFIX + "classifier.bias"] = arrays["head/bias"]
    pattern = "|".join(re.escape(m) for m in sorted(modules))
    config = {
        "peft_type": "LORA", "task_type": None, "base_model_name_or_path": None,
        "auto_mapping": {"base_model_class": "ViTForImageClassification",
                         "parent_library": "transformers.models.vit.modeling_vit"},
        "r": settings["rank"], "lora_alpha": settings["alpha"], "use_rslora": False, "use_dora": False,
        "target_modules": rf".*\.layers\.\d+\.({pattern})", "modules_to_save": ["classifier"] if "head/kernel" in arrays else None,
        "bias": "none", "lora_bias": False, "fan_in_fan_out": False, "lora_dropout": 0.0, "init_lora_weights": True,
        "inference_mode": True, "rank_pattern": {}, "alpha_pattern": {}, "written_by": "keras_vit",
    }
    return {k: np.asarray(v, np.float32) for k, v in tensors.items()}, config


def _peft_module(name):
    """`(block, transformers-5 module)` of a PEFT module name (transformers 4 or 5, with or
    without `vit.`), or None."""
    name = name[len("vit."):] if name.startswith("vit.") else name
    for old, new in V5_MODULES:
        name = re.sub(rf"^encoder\.layer\.(\d+)\.{re.escape(old)}$", rf"layers.\1.{new}", name)
    match = re.fullmatch(r"layers\.(\d+)\.(.+)", name)
    return (int(match.group(1)), match.group(2)) if match else None


def _is_scale(value):
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value) and value > 0


def _is_count(value):
    return isinstance(value, numbers.Integral) and not isinstance(value, bool) and value >= 1


def _pattern(pattern, where):
    """`pattern` compiled as PEFT matches a pattern key, or a one-line ValueError."""
    try:
        return re.compile(rf"(.*\.)?({pattern})$")
    except (re.error, TypeError) as error:
        raise ValueError(f"{where}: pattern {pattern!r} is not a regular expression ({error}).") from None


def check_peft_config(config, path):
    """Raises ValueError (one line naming `path`) unless the PEFT settings keras_vit reads are
    what PEFT accepts: `r` a whole number >= 1, `lora_alpha` a finite number > 0,
    `rank_pattern` / `alpha_pattern` objects of regular expressions to such values,
    `target_modules` a regular expression or a list of module names, `use_rslora` a bool."""
    where = f"{path}/{PEFT_CONFIG}"
    problems = []
    if not _is_count(config.get("r", 8)):
        problems.append(f"r={config.get('r')!r} (expected a whole number >= 1; PEFT refuses rank 0)")
    if not _is_scale(config.get("lora_alpha", 8)):
        problems.append(f"lora_alpha={config.get('lora_alpha')!r} (expected a finite number > 0)")
    for name, ok, expected in (("rank_pattern", _is_count, "whole numbers >= 1"),
                               ("alpha_pattern", _is_scale, "finite numbers > 0")):
        patterns = config.get(name) or {}
        if not isinstance(patterns, dict):
            problems.append(f"{name}={patterns!r} (expected an object of patterns to {expected})")
            continue
        bad = {key: value for key, value in patterns.items() if not ok(value)}
        if bad:
            problems.append(f"{name} values {bad!r} (expected {expected})")
        for key in patterns:
            _pattern(key, where)
    targets = config.get("target_modules")
    if not (targets is None or isinstance(targets, str) and _pattern(targets, where)
            or isinstance(targets, list) and targets and all(isinstance(t, str) and t for t in targets)):
        problems.append(f"target_modules={targets!r} (expected a regular expression or a list of module names)")
    if not isinstance(config.get("use_rslora", False), bool):
        problems.append(f"use_rslora={config.get('use_rslora')!r} (expected true or false)")
    if problems:
        raise ValueError(f"{where} records {'; '.join(problems)}.")


def _targeted(config, module):
    """Whether PEFT adapts `module` under `target_modules` (a string: a full match; a list: the
    name or a suffix after a dot; absent: PEFT's default for the model type, not checked)."""
    targets = config.get("target_modules")
    if targets is None:
        return True
    if isinstance(targets, str):
        return re.fullmatch(targets, module) is not None
    return any(module == t or module.endswith("." + t) for t in targets)


def _pattern_value(config, name, module, default):
    """The value of the first `name` (`rank_pattern` / `alpha_pattern`) pattern matching
    `module` as PEFT matches it, else `default`."""
    for pattern, value in (config.get(name) or {}).items():
        if _pattern(pattern, "").match(module):
            return value
    return default


def _peft_scale(config, module, rank):
    """PEFT's scale of one module: its alpha (`alpha_pattern` as PEFT matches it) over its rank
    (or the rank's square root with `use_rslora`)."""
    alpha = _pattern_value(config, "alpha_pattern", module, config.get("lora_alpha", 8))
    return alpha / (rank**0.5 if config.get("use_rslora") else rank)


def from_peft(tensors, config, path):
    """keras_vit's `(arrays, settings)` of a PEFT LoRA adapter of transformers' ViT."""
    if config.get("peft_type", "LORA") != "LORA":
        raise ValueError(f"{path} is a PEFT {config.get('peft_type')} adapter; keras_vit reads LORA adapters.")
    unsupported = [k for k in ("use_dora", "lora_bias", "fan_in_fan_out") if config.get(k)]
    if config.get("bias", "none") != "none":
        unsupported.append(f"bias={config['bias']!r}")
    if unsupported:
        raise ValueError(f"{path}: a PEFT adapter with {', '.join(unsupported)}; keras_vit reads plain LoRA "
                         "(A and B of each linear layer, bias='none').")
    layer_of = {name: (layer, j) for layer, names in PEFT_MODULES.items() for j, name in enumerate(names)}
    parts, head, unknown = {}, {}, []
    for key, value in tensors.items():
        name = key[len(PEFT_PREFIX):] if key.startswith(PEFT_PREFIX) else key
        if name in ("classifier.weight", "classifier.bias"):
            head["head/kernel" if name.endswith("weight") else "head/bias"] = value.T if value.ndim == 2 else value
            continue
        match = re.fullmatch(r"(.+)\.lora_([AB])\.weight", name)
        found = match and _peft_module(match.group(1))
        if not found or found[1] not in layer_of:
            unknown.append(key)
            continue
        parts.setdefault((found[0], found[1], match.group(1)), {})[match.group(2)] = np.asarray(value, np.float32)
    if unknown or not parts:
        raise ValueError(f"{path}: no LoRA of transformers' ViT projections (q/k/v/o_proj, fc1, fc2) in "
                         f"{PEFT_WEIGHTS}" + (f"; unexpected keys {unknown[:3]}" if unknown else "") + ".")
    check_peft_config(config, path)
    untargeted = sorted(name for _, _, name in parts if not _targeted(config, name))
    if untargeted:
        raise ValueError(f"{path}: target_modules={config.get('target_modules')!r} does not match {untargeted[0]}"
                         f"{f' (and {len(untargeted) - 1} more)' if len(untargeted) > 1 else ''}, whose LoRA "
                         f"{PEFT_WEIGHTS} holds; PEFT would not adapt it.")
    updates = {}
    for (block, module, name), ab in sorted(parts.items()):
        if set(ab) != {"A", "B"}:
            raise ValueError(f"{path}: {name} has lora_{''.join(ab)} without lora_{({'A', 'B'} - set(ab)).pop()}.")
        rank = _pattern_value(config, "rank_pattern", name, config.get("r", 8))
        if ab["A"].ndim != 2 or ab["B"].ndim != 2 or ab["A"].shape[0] != rank or ab["B"].shape[1] != rank:
            raise ValueError(f"{path}: {name} has lora_A {ab['A'].shape} and lora_B {ab['B'].shape}; its rank "
                             f"{rank} ({PEFT_CONFIG}'s r or rank_pattern) needs ({rank}, in) and (out, {rank}).")
        layer, j = layer_of[module]
        _add(updates, block, layer, j, ab["A"].T, ab["B"].T * _peft_scale(config, name, rank), path)
    return _from_layers(updates, head)


def write_peft(folder, arrays, settings):
    """Writes the PEFT adapter folder (which must not exist)."""
    from safetensors.numpy import save_file

    tensors, config = to_peft(arrays, settings)
    os.makedirs(folder)
    save_file(tensors, os.path.join(folder, PEFT_WEIGHTS), metadata={"format": "pt"})
    with open(os.path.join(folder, PEFT_CONFIG), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2)


def is_peft(path):
    return os.path.isfile(os.path.join(path, PEFT_CONFIG))


def read_peft(folder):
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    try:
        with open(os.path.join(folder, PEFT_CONFIG), encoding="utf-8") as f:
            config = parse_json(f.read())
        tensors = load_file(os.path.join(folder, PEFT_WEIGHTS))
    except (OSError, ValueError, SafetensorError) as error:
        raise ValueError(f"{folder} is not a readable PEFT adapter folder ({error}).") from None
    if not isinstance(config, dict):
        raise ValueError(f"{folder}: {PEFT_CONFIG} is not a JSON object.")
    return from_peft(tensors, config, folder)


# -------------------------------------------------------------------------------- KerasHub

KERASHUB_SUFFIX = ".lora.h5"  # save_lora_weights requires it
# Index of each LoRA layer among ViTBackbone's layers with weights (Keras' `_flatten_layers`:
# the embedding's 3, the encoder and its final norm, then the blocks last to first, 11 each).
HUB_FIRST_BLOCK, HUB_BLOCK_LAYERS = 5, 11
HUB_OFFSETS = {"query": 9, "key": 8, "value": 7, "attention_output": 6, "dense_1": 3, "dense_2": 2}
HUB_LAYER = {"attention/out": "attention_output", "mlp/dense_0": "dense_1", "mlp/dense_1": "dense_2"}
QKV_NAMES = ("query", "key", "value")


def _hub_index(block, depth, name):
    return HUB_FIRST_BLOCK + HUB_BLOCK_LAYERS * (depth - 1 - block) + HUB_OFFSETS[name]


def to_kerashub(arrays, settings, path):
    """`({index: (A, B)}, rank)` of KerasHub's ViTBackbone LoRA (alpha = rank); `path` names the
    adapter in errors."""
    heads = settings.get("num_heads")
    if not heads:
        raise ValueError(f"{path}: the adapter records no head count (a PEFT folder, or a lora.npz of an earlier "
                         "keras_vit); load it onto its base model (lora.load) and save it with layout='kerashub'.")
    depth, scale = _depth(arrays, settings), settings["alpha"] / settings["rank"]
    layers = {}
    for (block, layer), (a, b) in _layers(arrays).items():
        rank, b = a.shape[1], b * scale
        if layer == "attention/qkv":  # per head h: A's block h holds a, B's rows h the head's columns
            dim = b.shape[1] // 3
            width = dim // heads
            spread = np.zeros((a.shape[0], heads, heads * rank), np.float32)
            for h in range(heads):
                spread[:, h, h * rank : (h + 1) * rank] = a
            for j, name in enumerate(QKV_NAMES):
                columns = b[:, j * dim : (j + 1) * dim].reshape(rank, heads, width)
                layers[_hub_index(block, depth, name)] = (spread, columns.transpose(1, 0, 2).reshape(heads * rank, width))
        elif layer == "attention/out":
            layers[_hub_index(block, depth, HUB_LAYER[layer])] = (a.reshape(heads, -1, rank), b)
        else:
            layers[_hub_index(block, depth, HUB_LAYER[layer])] = (a, b)
    rank = max(a.shape[-1] for a, _ in layers.values())
    padded = {i: (np.pad(a, [(0, 0)] * (a.ndim - 1) + [(0, rank - a.shape[-1])]), np.pad(b, ((0, rank - b.shape[0]), (0, 0))))
              for i, (a, b) in layers.items()}
    return padded, rank


def from_kerashub(layers, rank, path):
    """keras_vit's `(arrays, settings)` of KerasHub's ViTBackbone LoRA `{index: (A, B)}`."""
    name_of = {offset: name for name, offset in HUB_OFFSETS.items()}
    placed = {}
    for index, ab in layers.items():
        block, offset = divmod(index - HUB_FIRST_BLOCK, HUB_BLOCK_LAYERS)
        if index < HUB_FIRST_BLOCK or offset not in name_of:
            raise ValueError(f"{path}: LoRA layer {index} is none of ViTBackbone's query / key / value / "
                             "attention_output / dense_1 / dense_2 layers.")
        placed[block, name_of[offset]] = ab
    depth = 1 + max(block for block, _ in placed)
    updates, heads = {}, None
    for (reverse, name), (a, b) in sorted(placed.items()):
        block = depth - 1 - reverse
        if name in QKV_NAMES:  # A (dim, heads, rank), B (rank, head_dim): rank heads * rank in keras_vit
            dim, heads = a.shape[0], a.shape[1]
            width = b.shape[1]
            fused_b = np.zeros((heads * rank, heads * width), np.float32)
            for h in range(heads):
                fused_b[h * rank : (h + 1) * rank, h * width : (h + 1) * width] = b
            _add(updates, block, "attention/qkv", QKV_NAMES.index(name), a.reshape(dim, heads * rank), fused_b, path)
        elif name == "attention_output":
            heads = a.shape[0]
            updates[block, "attention/out"] = (a.reshape(-1, rank), b, 1.0)
        else:
            updates[block, {"dense_1": "mlp/dense_0", "dense_2": "mlp/dense_1"}[name]] = (a, b, 1.0)
    return _from_layers(updates, depth=depth, **({"num_heads": heads} if heads else {}))


def kerashub_loading(rank, layer_names):
    """The calls that load a `.lora.h5` into KerasHub's ViT: its `load_lora_weights` enables only
    query and value, at the file's rank, unless LoRA is enabled on the file's layers first."""
    return f"backbone.enable_lora({rank}, {sorted(layer_names)}); backbone.load_lora_weights(path)"


def write_kerashub(path, arrays, settings, source=None):
    """Writes the `.lora.h5` file as KerasHub's `save_lora_weights` (Keras' H5 store: `vars`
    groups); returns how KerasHub loads it (`kerashub_loading`). `source`: the adapter converted
    (named in errors; default `path`)."""
    import h5py

    layers, rank = to_kerashub(arrays, settings, source or path)
    names = {name for name, offset in HUB_OFFSETS.items() for i in layers if (i - HUB_FIRST_BLOCK) % HUB_BLOCK_LAYERS == offset}
    with h5py.File(path, "w") as f:
        f.create_group("lora/vars").create_dataset("rank", data=rank)
        for index, (a, b) in sorted(layers.items()):
            group = f.create_group(f"lora/{index}/vars")
            group.create_dataset("lora_kernel_a", data=a.astype(np.float32))
            group.create_dataset("lora_kernel_b", data=b.astype(np.float32))
    return kerashub_loading(rank, names)


def read_kerashub(path):
    import h5py

    from keras_vit.weights.containers import h5_array

    try:
        with h5py.File(path, "r") as f:
            def read(name):  # bounded and checked against what the file stores, as checkpoints are
                return h5_array(f[name], f"{name!r} in {path}")

            rank = int(read("lora/vars/rank"))
            layers = {int(k): (read(f"lora/{k}/vars/lora_kernel_a"), read(f"lora/{k}/vars/lora_kernel_b"))
                      for k in f["lora"] if k != "vars"}
    except (OSError, KeyError, TypeError, ValueError) as error:
        raise ValueError(f"{path} is not a KerasHub LoRA file (save_lora_weights) ({error}).") from None
    if not layers:
        raise ValueError(f"{path}: a KerasHub LoRA file without LoRA layers.")
    return from_kerashub(layers, rank, path)
