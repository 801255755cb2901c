"""Builds a Vision Transformer holding a checkpoint's weights (`weights=` of the builders)."""

import dataclasses
import logging
import os

import numpy as np

from keras_vit.architecture import VARIANTS, build_model, image_shape
from keras_vit.layers.position_embedding import INTERPOLATIONS, resize_position_embedding
from keras_vit.layers.transformer_block import LAYER_NORM_EPSILON
from keras_vit.weights import registry, stems
from keras_vit.weights.canonical import Checkpoint, read_checkpoint
from keras_vit.weights.layouts import ATTN, KERAS, MLP, POSEMB
from keras_vit.weights.lazy import LazyArray
from keras_vit.weights.rules import convert

logger = logging.getLogger("keras_vit.weights")
CHECKPOINT_SUFFIXES = (".npz", ".safetensors", ".pth", ".pt", ".bin", ".h5", ".keras", ".json")
HEAD_KEYS = ("head/kernel", "head/bias")
PRE_LOGITS_KEYS = ("pre_logits/kernel", "pre_logits/bias")


@dataclasses.dataclass(frozen=True)
class PretrainedWeights:
    """`weights=` with options: `source` is a named checkpoint or a path; `interpolation`
    ("bilinear", the original's, or "bicubic", timm's) resizes the position embeddings when
    the model's patch grid differs from the checkpoint's."""

    source: object
    interpolation: str = "bilinear"

    def __post_init__(self):
        if self.interpolation not in INTERPOLATIONS:
            raise ValueError(f"Unknown interpolation {self.interpolation!r}; expected one of {INTERPOLATIONS}.")


def resolve(source, config=None):
    """The local path of `source`: an existing file or folder, or a named checkpoint
    (downloaded into the cache if needed)."""
    if isinstance(source, os.PathLike) or (isinstance(source, str) and os.path.exists(source)):
        if not os.path.exists(source):
            raise FileNotFoundError(f"No checkpoint file or folder at {os.fspath(source)}.")
        return os.fspath(source)
    if not isinstance(source, str):
        raise ValueError(
            f"weights={source!r}: expected None, a checkpoint name, a path, or PretrainedWeights."
        )
    named = source.split("/", 1)[0] in VARIANTS or "/" not in source
    if not named or source.endswith(CHECKPOINT_SUFFIXES):
        raise FileNotFoundError(f"No checkpoint file or folder at {source}.")
    from keras_vit.weights.download import fetch

    variant = registry.variant_of(config) if config is not None else None
    if config is not None and variant is None:
        raise ValueError(
            f"Unknown weights {source!r} for this architecture: not an existing file or folder, and "
            f"named checkpoints exist only for the standard variants ({', '.join(VARIANTS)})."
        )
    return fetch(registry.find(source, variant))


def _mismatch(ckpt, key, expected):
    actual = ckpt.shape(key)
    if actual is None or len(actual) != len(expected):
        return f"{key}: checkpoint shape {actual}, the model expects {expected}"
    if all(e is None or a == e for a, e in zip(actual, expected)):
        return None
    return f"{key} ({ckpt.tensors[key].source}): checkpoint shape {actual}, the model expects {tuple(expected)}"


def check_architecture(ckpt, config):
    """Raises ValueError naming every key whose shape does not fit `config`."""
    p, d, m, h = config.patch_size, config.hidden_dim, config.mlp_dim, config.num_heads
    problems = [
        _mismatch(ckpt, "embedding/kernel", (p, p, None, d)),
        _mismatch(ckpt, MLP.format(i=0) + "Dense_0/kernel", (d, m)),
    ]
    if d % h == 0:
        problems.append(_mismatch(ckpt, ATTN.format(i=0) + "query/kernel", (d, h, d // h)))
    if ckpt.depth != config.depth:
        problems.append(
            f"the checkpoint has {ckpt.depth} encoder blocks (Transformer/encoderblock_0.."
            f"{ckpt.depth - 1}), the model has {config.depth}"
        )
    stem, model_stem = ckpt.stem, config.stem
    if stem is not None and model_stem is None:
        problems.append(f"the checkpoint has a {stem.name} stem ({', '.join(stem.canonical_prefixes)}); the model has none")
    if model_stem is not None and stem is not stems.stem_of_layer(model_stem):
        problems.append(f"the model has a {type(model_stem).__name__} stem; the checkpoint has {stem.name if stem else 'none'}")
    if config.include_top and config.representation_size:
        problems.append(_mismatch(ckpt, "pre_logits/kernel", (d, config.representation_size)))
    problems = [p for p in problems if p]
    if problems:
        raise ValueError(f"Checkpoint {ckpt.path} does not fit the model:\n  " + "\n  ".join(problems))


def select_head(ckpt, config):
    """The canonical tensors to load: the head kept only if it fits, pre_logits only if asked
    for. Logs when the model gets a new zero-initialised head."""
    tensors = dict(ckpt.tensors)
    has_pre, classes = "pre_logits/kernel" in tensors, ckpt.classes
    if not config.include_top:
        for key in HEAD_KEYS + PRE_LOGITS_KEYS:
            tensors.pop(key, None)
        return tensors, False
    want_pre = bool(config.representation_size)
    if not want_pre:
        for key in PRE_LOGITS_KEYS:
            tensors.pop(key, None)
    if classes == config.classes and has_pre == want_pre:
        return tensors, False
    for key in HEAD_KEYS:
        tensors.pop(key, None)
    if classes is None:
        reason = "the checkpoint has no head"
    elif classes != config.classes:
        reason = f"the checkpoint's head has {classes} classes"
    else:
        reason = "the checkpoint's head sits on its pre_logits layer, which is dropped"
    logger.warning(
        "New zero-initialised head with %d classes (%s): train it before use, as in "
        "fine-tuning. Checkpoint: %s", config.classes, reason, ckpt.path,
    )
    return tensors, True


def _resized_posemb(posemb, old_grid, new_grid, method):
    if old_grid == tuple(new_grid):
        return posemb
    logger.info("Resizing position embeddings from %s to %s (%s).", old_grid, tuple(new_grid), method)
    return LazyArray(
        (1, 1 + new_grid[0] * new_grid[1], posemb.shape[-1]),
        np.float32,
        lambda: resize_position_embedding(posemb.load(), new_grid, old_grid=old_grid, method=method),
        posemb.source,
    )


def assign(model, ckpt, tensors, interpolation="bilinear", new=()):
    """Loads canonical `tensors` of `ckpt` into `model`, resizing the position embeddings to
    the model's grid. Every model variable except those in `new` must receive a value of its
    exact shape; nothing is assigned unless all do."""
    tensors = dict(tensors)
    grid = model.get_layer("posembed_input").grid_size
    tensors[POSEMB] = _resized_posemb(tensors[POSEMB], ckpt.patch_grid, grid, interpolation)
    values = convert(
        tensors, KERAS, to_canonical=False, heads=ckpt.num_heads,
        keymaps=stems.keymaps("keras", to_canonical=False), what=f"checkpoint {ckpt.path}",
    )
    variables = {v.path: v for v in model.weights}
    problems = [f"{k} ({v.source}): the model has no such variable" for k, v in values.items() if k not in variables]
    for path, variable in variables.items():
        if path not in values:
            if path not in new:
                problems.append(f"{path}: no value in the checkpoint")
        elif values[path].shape != tuple(variable.shape):
            problems.append(
                f"{path} ({values[path].source}): checkpoint shape {values[path].shape}, the model "
                f"expects {tuple(variable.shape)}"
            )
    if problems:
        raise ValueError(f"Checkpoint {ckpt.path} does not fit the model:\n  " + "\n  ".join(problems))
    for path, variable in variables.items():
        if path in values:
            variable.assign(values[path].load().astype(variable.dtype, copy=False))


def build_with_weights(config, weights, input_shape=None, input_tensor=None):
    """`VisionTransformer(..., weights=...)`: builds the model for the `ViTConfig` `config`
    and loads the checkpoint. Defaults follow the checkpoint: input size (its resolution),
    GELU flavour (tanh for the original npz files, exact for timm / Hugging Face) and
    LayerNorm epsilon."""
    spec = weights if isinstance(weights, PretrainedWeights) else PretrainedWeights(weights)
    ckpt = weights_checkpoint(spec.source, config)
    check_architecture(ckpt, config)
    config = dataclasses.replace(
        config,
        approximate_gelu=(True if ckpt.approximate_gelu is None else ckpt.approximate_gelu)
        if config.approximate_gelu is None else config.approximate_gelu,
        layer_norm_epsilon=(ckpt.layer_norm_epsilon or LAYER_NORM_EPSILON)
        if config.layer_norm_epsilon is None else config.layer_norm_epsilon,
    )
    default_size = tuple(g * config.stride for g in ckpt.patch_grid)
    if input_shape is None and input_tensor is None:
        input_shape = (*default_size, ckpt.channels if config.stem is None else 3)
    shape = image_shape(input_shape, input_tensor, config.stride, need_rgb=False)
    if config.stem is None and shape[-1] != ckpt.channels:
        raise ValueError(
            f"input_shape={shape} has {shape[-1]} channels; the checkpoint's embedding/kernel "
            f"{ckpt.shape('embedding/kernel')} takes {ckpt.channels}."
        )
    tensors, new_head = select_head(ckpt, config)
    model = build_model(config, shape, input_tensor, default_size)
    assign(model, ckpt, tensors, spec.interpolation, new=HEAD_KEYS if new_head else ())
    return model


def weights_checkpoint(source, config=None, num_heads=None):
    """Reads `source` (name or path) as a canonical `Checkpoint`. The head count, which timm
    and `.weights.h5` files do not record, comes from `config` (a `ViTConfig`) or
    `num_heads`; named checkpoints are looked up for `config`'s variant."""
    if isinstance(source, Checkpoint):
        return source
    heads = config.num_heads if config else num_heads
    return read_checkpoint(resolve(source, config), num_heads=heads)
