"""Builds the Vision Transformer of a canonical `Checkpoint` and assigns its weights."""

import dataclasses
import logging

import numpy as np

from keras_vit.model.architecture import build_model, image_shape
from keras_vit.config.interpolation import DEFAULT
from keras_vit.layers.position_embedding import resize_position_embedding
from keras_vit.config.vit_config import resolve_own
from keras_vit.weights import stems, variables
from keras_vit.weights.canonical import ATTN, FC_NORM, HEAD, HEAD_DIST, MAP, MLP, POSEMB, PRE_LOGITS, PROJECTION, PROJECTION_BIAS
from keras_vit.weights.lazy import LazyArray
from keras_vit.weights.patch_resize import resized_patch_kernel

logger = logging.getLogger("keras_vit.weights")


def _mismatch(ckpt, key, expected):
    actual = ckpt.shape(key)
    if actual is None or len(actual) != len(expected):
        return f"{key}: checkpoint shape {actual}, the model expects {expected}"
    if all(e is None or a == e for a, e in zip(actual, expected)):
        return None
    return f"{key} ({ckpt.tensors[key].source}): checkpoint shape {actual}, the model expects {tuple(expected)}"


def check_architecture(ckpt, config):
    """Raises ValueError naming every key whose shape does not fit `config`."""
    d, m, h = config.hidden_dim, config.mlp_dim, config.num_heads
    problems = [
        _mismatch(ckpt, "embedding/kernel", (ckpt.patch_size, ckpt.patch_size, None, d)),  # any patch size loads
        _mismatch(ckpt, MLP.format(i=0) + "Dense_0/kernel", (d, 2 * m if config.mlp == "swiglu" else m)),
    ]
    if d % h == 0:
        problems.append(_mismatch(ckpt, ATTN.format(i=0) + "query/kernel", (d, h, d // h)))
    if ckpt.depth != config.depth:
        problems.append(
            f"the checkpoint has {ckpt.depth} encoder blocks (Transformer/encoderblock_0.."
            f"{ckpt.depth - 1}), the model has {config.depth}"
        )
    if ckpt.fc_norm != config.fc_norm and (config.include_top or config.pooling is not None):
        where = {True: "on the pooled features (fc_norm)", False: "on the tokens"}
        problems.append(
            f"the checkpoint's final LayerNorm is {where[ckpt.fc_norm]}, the model's {where[config.fc_norm]} "
            f"(build it with fc_norm={ckpt.fc_norm})"
        )
    for name in ("pre_norm", "patch_bias", "attention_norm"):  # CLIP's, EVA-CLIP's
        if getattr(ckpt, name) != getattr(config, name):
            problems.append(f"the checkpoint has {name}={getattr(ckpt, name)}, the model {name}={getattr(config, name)} "
                            f"(build it with {name}={getattr(ckpt, name)})")
    if config.include_top and ckpt.classes == config.classes and bool(ckpt.unit_features) != config.unit_features:
        problems.append(f"the checkpoint's head reads {'unit-length' if ckpt.unit_features else 'unscaled'} features, "
                        f"the model's {'unit-length' if config.unit_features else 'unscaled'} ones (build it with "
                        f"unit_features={bool(ckpt.unit_features)})")
    if config.projection_dim and ckpt.projection_dim != config.projection_dim:
        problems.append(f"the checkpoint's image projection is {ckpt.projection_dim or 'absent'} wide, the model's "
                        f"{config.projection_dim} (build it with projection_dim={ckpt.projection_dim})")
    if config.projection_dim and ckpt.projection_bias != config.projection_bias:
        problems.append(f"the checkpoint's image projection has projection_bias={ckpt.projection_bias}, the model "
                        f"projection_bias={config.projection_bias} (build it with projection_bias={ckpt.projection_bias})")
    if ckpt.num_registers != config.num_registers:
        problems.append(
            f"the checkpoint has {ckpt.num_registers} register tokens, the model {config.num_registers} "
            f"(build it with num_registers={ckpt.num_registers})"
        )
    stem, model_stem = ckpt.stem, config.stem
    if model_stem is not None and ckpt.patch_size != config.patch_size:
        problems.append(f"the checkpoint's patch size is {ckpt.patch_size}, the model's {config.patch_size} (after a stem)")
    if stem is not None and model_stem is None:
        problems.append(f"the checkpoint has a {stem.name} stem ({', '.join(stem.canonical_prefixes)}); the model has none")
    if model_stem is not None and stem is not stems.stem_of_layer(model_stem):
        problems.append(f"the model has a {type(model_stem).__name__} stem; the checkpoint has {stem.name if stem else 'none'}")
    if config.include_top and config.representation_size:
        problems.append(_mismatch(ckpt, "pre_logits/kernel", (d, config.representation_size)))
    problems = [p for p in problems if p]
    if problems:
        _refuse(ckpt, problems)


def _refuse(ckpt, problems):
    """Raises one ValueError line naming the first eight `problems` of fitting `ckpt` to a model."""
    more = f"; and {len(problems) - 8} more" if len(problems) > 8 else ""
    raise ValueError(f"Checkpoint {ckpt.path} does not fit the model: {'; '.join(problems[:8])}{more}.")


def select_head(ckpt, config):
    """The canonical tensors to load: the head kept only if it fits, pre_logits only if asked
    for. Logs when the model gets a new zero-initialised head."""
    tensors = dict(ckpt.tensors)
    has_pre, classes = "pre_logits/kernel" in tensors, ckpt.classes
    pooled = config.include_top or config.pooling is not None
    if not (pooled and config.head_pooling == "map"):  # the model has no MAP head
        tensors = {k: v for k, v in tensors.items() if not k.startswith(MAP)}
    if not pooled:  # the tokens, without the norm of the pooled features (timm's fc_norm)
        for key in FC_NORM:
            tensors.pop(key, None)
    if not (pooled and config.projection_dim):  # the features before CLIP's image projection
        tensors.pop(PROJECTION, None)
        tensors.pop(PROJECTION_BIAS, None)
    if not (config.include_top and config.distillation_head):
        for key in HEAD_DIST:
            tensors.pop(key, None)
    if not config.include_top:
        for key in HEAD + PRE_LOGITS:
            tensors.pop(key, None)
        return tensors, False
    want_pre = bool(config.representation_size)
    if not want_pre:
        for key in PRE_LOGITS:
            tensors.pop(key, None)
    if classes == config.classes and has_pre == want_pre:
        return tensors, False
    for key in HEAD + HEAD_DIST:
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


def _resized_posemb(posemb, old_grid, new_grid, method, prefix):
    if old_grid == tuple(new_grid):
        return posemb
    logger.info("Resizing position embeddings from %s to %s (%s).", old_grid, tuple(new_grid), method)
    return LazyArray(
        (1, prefix + new_grid[0] * new_grid[1], posemb.shape[-1]),
        np.float32,
        lambda: resize_position_embedding(posemb.load(), new_grid, prefix, old_grid=old_grid, method=method),
        posemb.source,
    )


def assign(model, ckpt, tensors, new=(), table=None):
    """Loads canonical `tensors` of `ckpt` into `model`, resizing the position embeddings to
    the model's grid as the model resizes them at run time (its `interpolation`). Every model
    variable except those in `new` must receive a value of its exact shape; nothing is
    assigned unless all do. `table`: the key table of `tensors` (default: a whole ViT's,
    `variables.TABLE`; `variables.EOMT_TABLE`: the EoMT head alone)."""
    tensors = dict(tensors)
    layer = model.get_layer("posembed_input")
    if POSEMB in tensors:
        tensors[POSEMB] = _resized_posemb(
            tensors[POSEMB], ckpt.patch_grid, layer.grid_size, layer.interpolation, ckpt.position_prefix
        )
    values = variables.from_canonical(tensors, ckpt.num_heads, f"checkpoint {ckpt.path}", table)
    by_path = {v.path: v for v in model.weights}
    problems = [f"{k} ({v.source}): the model has no such variable" for k, v in values.items() if k not in by_path]
    for path, variable in by_path.items():
        if path not in values:
            if path not in new:
                problems.append(f"{path}: no value in the checkpoint")
        elif values[path].shape != tuple(variable.shape):
            problems.append(
                f"{path} ({values[path].source}): checkpoint shape {values[path].shape}, the model "
                f"expects {tuple(variable.shape)}"
            )
    if problems:
        _refuse(ckpt, problems)
    for path, variable in by_path.items():
        if path in values:
            variable.assign(values[path].load().astype(variable.dtype, copy=False))


def build_from_checkpoint(config, ckpt, interpolation=None, input_shape=None, input_tensor=None):
    """The model for the `ViTConfig` `config` holding `ckpt`'s weights. Defaults follow the
    checkpoint: input size (its resolution), GELU flavour (tanh for the original npz files,
    exact for timm / Hugging Face, quick GELU where the checkpoint says so), LayerNorm epsilon, register tokens, preprocessing and the resize
    of the position embeddings (its library's; `interpolation`, else `config.interpolation`, chooses
    another). Another patch size than the checkpoint's resizes the patch embedding (FlexiViT,
    as that library does) and, at the same resolution, the position embeddings."""
    config = resolve_own(config, {**ckpt.options, "num_registers": ckpt.num_registers,
                                  "interpolation": interpolation or ckpt.interpolation}, f"Checkpoint {ckpt.path}")
    if interpolation:
        config = dataclasses.replace(config, interpolation=interpolation)
    check_architecture(ckpt, config)
    default_size = tuple(g * ckpt.patch_size * (config.stride // config.patch_size) for g in ckpt.patch_grid)
    if input_shape is None and input_tensor is None:
        input_shape = (*default_size, ckpt.channels if config.stem is None else 3)
    shape = image_shape(input_shape, input_tensor, config.stride, need_rgb=False)
    if config.stem is None and shape[-1] != ckpt.channels:
        raise ValueError(
            f"input_shape={shape} has {shape[-1]} channels; the checkpoint's embedding/kernel "
            f"{ckpt.shape('embedding/kernel')} takes {ckpt.channels}."
        )
    tensors, new_head = select_head(ckpt, config)
    if ckpt.patch_size != config.patch_size:
        logger.info("Resizing the patch embedding from %d to %d pixels (FlexiViT).", ckpt.patch_size, config.patch_size)
        tensors["embedding/kernel"] = resized_patch_kernel(
            tensors["embedding/kernel"], config.patch_size, config.interpolation or DEFAULT
        )
    model = build_model(config, shape, input_tensor, default_size)
    assign(model, ckpt, tensors, new=HEAD + HEAD_DIST if new_head else ())
    return model
