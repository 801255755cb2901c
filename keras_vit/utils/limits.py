"""The sizes keras_vit accepts from a file or a configuration, declared once, and the checks
that every reader and builder runs before anything is allocated: each dimension bounded, the
sizes multiplied as Python integers (no overflow), so that a small file declaring a huge model
or tensor is refused in one line instead of exhausting memory. The bounds are far above every
published Vision Transformer (ViT-22B: width 6144, MLP 24576, depth 48, 4.3e9 parameters).

Plain Python, no Keras: the readers and the command line check before importing it.
"""

import math
import numbers

MAX_DIMENSION = 2**18  # any one size: a width, an MLP width, classes, heads, a tensor axis, an image side, tokens
MAX_DEPTH = 2**10  # encoder blocks
MAX_PIXELS = 2**28  # height x width of an input image (16384 x 16384)
MAX_PARAMETERS = 2**35  # weights of a model, or elements of one tensor (128 GiB of float32)
MAX_RANK = 8  # axes of a tensor
MAX_TENSORS = 2**16  # tensors of one checkpoint file (ViT-22B: about 1,000)


def check_tensor_count(count, what):
    """Raises ValueError (one line naming `what`) if a file declares more than `MAX_TENSORS`
    tensors: refused at the declared count, before reading them makes the work grow with it."""
    if count > MAX_TENSORS:
        raise ValueError(f"{what} declares {count} tensors; accepted: up to {MAX_TENSORS} (the file is damaged or "
                         "crafted).")


def _is_size(value, low):
    return isinstance(value, numbers.Integral) and not isinstance(value, bool) and low <= value <= MAX_DIMENSION


def check_shape(shape, what, allow_empty=False):
    """Raises ValueError (one line naming `what`) unless `shape` has at most `MAX_RANK` axes,
    each a whole number in [1, MAX_DIMENSION] (0 too with `allow_empty`), and at most
    `MAX_PARAMETERS` elements."""
    low = 0 if allow_empty else 1
    if len(shape) > MAX_RANK or not all(_is_size(n, low) for n in shape) or math.prod(shape) > MAX_PARAMETERS:
        raise ValueError(
            f"{what} declares shape {tuple(shape)}; accepted: up to {MAX_RANK} axes of {low} to {MAX_DIMENSION} "
            f"and at most {MAX_PARAMETERS} elements (the file is damaged or crafted)."
        )


def check_model_size(what, *, width, depth, mlp_dim, tokens, classes=0, pixels=0):
    """Raises ValueError (one line naming `what`) unless a Vision Transformer of these sizes
    fits the bounds: `depth` <= MAX_DEPTH, the others <= MAX_DIMENSION, `pixels` (height x
    width of its input) <= MAX_PIXELS and its weights (blocks, position embeddings, head)
    <= MAX_PARAMETERS, counted without overflow."""
    sizes = dict(width=width, mlp_dim=mlp_dim, tokens=tokens, classes=classes)
    problems = [f"{name}={value!r} (accepted: 0 to {MAX_DIMENSION})" for name, value in sizes.items()
                if not _is_size(value, 0)]
    if not _is_size(depth, 0) or depth > MAX_DEPTH:
        problems.append(f"depth={depth!r} (accepted: 0 to {MAX_DEPTH})")
    if not isinstance(pixels, numbers.Integral) or pixels > MAX_PIXELS:
        problems.append(f"an input of {pixels} pixels (accepted: up to {MAX_PIXELS}, e.g. 16384 x 16384)")
    if not problems:
        parameters = depth * (4 * width * width + 2 * width * mlp_dim) + (tokens + classes) * width
        if parameters > MAX_PARAMETERS:
            problems.append(f"about {parameters} weights (accepted: up to {MAX_PARAMETERS})")
    if problems:
        raise ValueError(f"{what}: a model of {'; '.join(problems)} would exhaust memory; refusing to build it.")


# The integer sizes a layer of a `.keras` configuration may hold (keras_vit's layers and
# Keras' own), and the one that counts encoder blocks.
SIZE_KEYS = ("hidden_dim", "mlp_dim", "num_heads", "patch_size", "units", "filters", "features", "width",
             "num_tokens", "num_prefix_tokens", "offset", "groups", "kernel_size", "strides", "grid_size")


def _layer_configs(node):
    """Every layer configuration (`{"class_name": ..., "config": {...}}`) in a Keras model
    configuration, nested models included."""
    if isinstance(node, dict):
        if isinstance(node.get("class_name"), str) and isinstance(node.get("config"), dict):
            yield node["class_name"], node["config"]
        for value in node.values():
            yield from _layer_configs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _layer_configs(value)


def _sizes(value, what):
    """The whole numbers of a size field (one, or a list of them; None: open)."""
    values = value if isinstance(value, list) else [value]
    if not all(v is None or _is_size(v, 0) for v in values):
        raise ValueError(f"{what}={value!r}: accepted whole numbers from 0 to {MAX_DIMENSION}; refusing to build it.")
    return [v for v in values if v is not None]


def check_keras_config(config, what):
    """Raises ValueError (one line naming `what`) unless the Keras model configuration
    `config` (a `.keras` file's `config.json`) declares sizes that `check_model_size` accepts:
    every size field of every layer bounded, the input image, and the model they make."""
    width = depth = mlp_dim = tokens = classes = pixels = 0
    for class_name, layer in _layer_configs(config):
        where = f"{what}: layer {layer.get('name', class_name)!r}"
        for key in SIZE_KEYS:
            if key in layer:
                found = _sizes(layer[key], f"{where} {key}")
                if key == "grid_size":
                    tokens = max([tokens, math.prod(found)])
                elif key in ("hidden_dim", "width"):
                    width = max([width, *found])
                elif key == "mlp_dim":
                    mlp_dim = max([mlp_dim, *found])
                elif key == "units":
                    classes = max([classes, *found])
        if "depth" in layer:
            found = layer["depth"]
            if not _is_size(found, 0) or found > MAX_DEPTH:
                raise ValueError(f"{where} depth={found!r}: accepted 0 to {MAX_DEPTH}; refusing to build it.")
            depth += found
        if class_name == "InputLayer":
            shape = layer.get("batch_shape") or []
            if not isinstance(shape, list):
                raise ValueError(f"{where} batch_shape={shape!r}: accepted a list of sizes; refusing to build it.")
            pixels = max(pixels, math.prod(_sizes(shape[1:3], f"{where} batch_shape")))
    check_model_size(what, width=width, depth=min(depth, MAX_DEPTH + 1), mlp_dim=mlp_dim, tokens=tokens,
                     classes=classes, pixels=pixels)
