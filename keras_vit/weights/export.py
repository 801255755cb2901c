"""Exports a keras_vit model's weights, and converts checkpoint files between formats.

Converting between files that do not need a model (npz, timm, Hugging Face) imports no
Keras; writing a Keras file, or exporting a model, does."""

import math
import os
import re

import numpy as np

from keras_vit.utils.files import atomic_path, check_space, check_target, one_line_errors
from keras_vit.weights import containers, formats, variables
from keras_vit.weights.canonical import BLOCK, EOMT_MASK_PROBS, EOMT_QUERIES, Checkpoint
from keras_vit.weights.formats.base import (AIMV2_OPTIONS, BLOCK_OPTIONS, CLIP_OPTIONS, EVA_CLIP_OPTIONS, HEAD_OPTIONS,
                                            PE_OPTIONS)
from keras_vit.weights.lazy import LazyArray
from keras_vit.weights.reading import read_checkpoint, weights_checkpoint

BLOCK_KEY = re.compile(re.escape(BLOCK).replace(r"\{i\}", r"(\d+)") + "(.+)")

FORMATS = formats.export_names()
# Writers of whole models other than one Vision Transformer, by the name of the layer that marks them:
# layer name -> (format option, write(path, model)). `keras_vit.dense.writing` adds the Depth Anything one.
MODEL_WRITERS = {}


def model_checkpoint(model):
    """The weights of a keras_vit Vision Transformer (or EoMT model) as a canonical `Checkpoint`."""
    import keras

    try:  # the first block (the EoMT model calls the blocks without their encoder)
        block = model.get_layer("encoder").blocks[0] if "encoder" in [x.name for x in model.layers] else \
            model.get_layer("encoderblock_0")
        grid = model.get_layer("posembed_input").grid_size
    except ValueError:
        raise ValueError(
            f"Model {model.name!r} is not a keras_vit Vision Transformer (it needs the layers "
            "'embedding', 'posembed_input' and 'encoder')."
        ) from None
    # a trained EoMT model's mask annealing: its state says which blocks still mask (below), not a weight
    annealing = [layer for layer in model.layers if type(layer).__name__ == "EoMTMaskAnnealing"]
    state = {v.path for layer in annealing for v in layer.weights}
    tensors = {
        v.path: LazyArray(
            v.shape, np.float32, lambda v=v: np.asarray(keras.ops.convert_to_numpy(v), np.float32), f"variable {v.path}"
        )
        for v in model.weights if v.path not in state
    }
    tensors = variables.to_canonical(tensors, block.num_heads, f"model {model.name!r}")
    names = [layer.name for layer in model.layers]
    if "eomt_head" in names:  # which of EoMT's last blocks attend through the masks: a setting, not a variable
        masked = np.asarray(model.get_layer("eomt_head").masked_attention, np.float32)
        if annealing:
            kept = np.asarray([keras.ops.convert_to_numpy(layer.probability()) for layer in annealing], np.float32)
            if ((kept > 0) & (kept < 1)).any():
                raise ValueError(f"{model.name}: its masks are annealed part-way (kept with probability "
                                 f"{[round(float(k), 4) for k in kept]}), which transformers applies at random at "
                                 "inference; export a model whose annealing is over (a run's final.keras).")
            masked = masked * kept
        tensors[EOMT_MASK_PROBS] = LazyArray.wrap(masked, "the EoMT head's masked_attention")
    pooling = "map" if "map_head" in names else model.get_layer("pooling").mode if "pooling" in names else None
    attention = block.attention
    rope = next((layer for layer in model.layers if type(layer).__name__ == "RopePositionEmbedding"), None)
    posembed = model.get_layer("posembed_input")
    naflex = type(posembed).__name__ == "NaFlexPositionEmbedding"
    return Checkpoint(model.name, "keras", tensors, block.num_heads, tuple(grid)).with_options(
        approximate_gelu=block.approximate_gelu, layer_norm_epsilon=block.layer_norm_epsilon, pooling=pooling,
        preprocessing=getattr(model, "preprocessing", None), interpolation=getattr(posembed, "interpolation", None),
        rope_theta=attention.rope_theta if rope else None, key_bias=attention.key_bias, naflex=naflex,
        rope_form=attention.rope_form if rope else None, sincos_form=getattr(posembed, "form", None) if not rope else None,
        rope_indexing=rope.indexing if rope else None, rope_reference_grid=rope.reference_grid if rope else None,
        quick_gelu=block.mlp.quick_gelu, unit_features="unit_features" in names,
        rope_offset=rope.index_offset if rope else None,
        map_heads=model.get_layer("map_head").num_heads if pooling == "map" else None,
    )


def export(model, path, format="npz", overwrite=False):
    """Writes `model`'s weights for another implementation (refusing an existing `path`
    unless `overwrite`).

    - "npz": the original google-research/vision_transformer file (flat '/' keys);
    - "timm": a timm `VisionTransformer` state dict as `.safetensors`;
    - "hf": a Hugging Face transformers folder (`config.json`, `model.safetensors`) that
      `ViTForImageClassification.from_pretrained` (or `ViTModel`, without a head) loads; its
      `hidden_act` is the model's GELU ("gelu_pytorch_tanh" for the tanh approximation);
    - any other name of `keras_vit.weights.formats.export_names()`.

    A Depth Anything `DenseModel` (DPT head, DINOv2 backbone) is written as "hf": a transformers
    `DepthAnythingForDepthEstimation` folder (`keras_vit.dense.writing`).
    """
    fmt = formats.by_option(format)
    check_output(path, fmt, overwrite)
    names = [layer.name for layer in model.layers]
    marked = next((name for name in MODEL_WRITERS if name in names), None)
    if marked is not None:  # not one Vision Transformer: its package's writer
        option, write = MODEL_WRITERS[marked]
        if fmt.option != option:
            raise ValueError(f"{model.name}: a model with a {marked} layer is written as format={option!r} only; "
                             "model.save('x.keras') keeps any.")
        with one_line_errors(path):
            return write(os.fspath(path), model)
    _write(fmt, os.fspath(path), model_checkpoint(model))


def convert_checkpoint(src, dst, format=None, num_heads=None, overwrite=False, force_download=False, include_top=True):
    """Converts the checkpoint `src` (a path or a named checkpoint) to `dst`, refusing an
    existing `dst` unless `overwrite`. The output format is `format`, else taken from `dst`'s
    name. `num_heads` is needed only for sources that do not record it (timm, `.weights.h5`,
    transformers weights without `config.json`) whose width no named model has, or whose
    heads differ from that model's. `force_download`: fetch a named `src` again.
    `include_top=False` writes the encoder without the classification head (e.g. a model whose
    head pools in a way the format's head cannot)."""
    dst = os.fspath(dst)
    fmt = formats.by_option(format) if format else formats.for_output(dst)
    source = (os.fspath(src),) if isinstance(src, (str, os.PathLike)) and os.path.exists(src) else ()
    check_output(dst, fmt, overwrite, inputs=source)
    ckpt = weights_checkpoint(src, num_heads=num_heads, force_download=force_download)
    ckpt = ckpt if include_top else ckpt.without_head()
    check_whole(ckpt, ckpt.path)
    with atomic_path(dst) as tmp:  # in place only once it reads back whole
        _write(fmt, tmp, ckpt)
        try:
            check_whole(read_checkpoint(tmp, num_heads=ckpt.num_heads), tmp)
        except ValueError as error:
            raise ValueError(f"{dst}: the file written does not read back as a whole checkpoint "
                             f"({str(error).replace(tmp, dst)}); nothing was written.") from None


def check_whole(ckpt, where):
    """Raises ValueError (one line naming `where`) unless `ckpt` is whole as `from_checkpoint`
    builds it: blocks 0 .. depth - 1, each holding the tensors block 0 holds (its optional
    ones included: biases, LayerScale, norms, rotary frequencies), and a position table that
    fits a grid."""
    blocks = {}
    for key in ckpt.tensors:
        match = BLOCK_KEY.fullmatch(key)
        if match:
            blocks.setdefault(int(match.group(1)), set()).add(match.group(2))
    if sorted(blocks) != list(range(len(blocks))):
        raise ValueError(f"{where}: encoder blocks {sorted(blocks)[:8]} are not numbered 0 to {len(blocks) - 1}.")
    for i, names in sorted(blocks.items()):
        differ = sorted(names ^ blocks[0])
        if differ:
            which = "lacks" if differ[0] in blocks[0] else "holds another tensor,"
            raise ValueError(f"{where}: block {i} {which} {BLOCK.format(i=i)}{differ[0]}, unlike block 0; every "
                             "block must hold the same tensors.")
    ckpt.patch_grid  # noqa: B018 (a position table of no grid raises, one line)


def check_output(path, fmt, overwrite=False, inputs=()):
    """Raises OSError (one line) unless `fmt` may be written at `path` (`files.check_target`:
    never over `inputs` or a folder holding them), nor into a checkpoint folder under a name
    it reads: that would change what the folder is read as."""
    check_target(path, overwrite=overwrite, folder=fmt.folder, inputs=inputs)
    folder, name = os.path.split(os.path.abspath(os.fspath(path)))
    if containers.reads_name(name) and os.path.isdir(folder) and containers.folder_weight_files(folder):
        raise FileExistsError(
            f"{folder} holds a checkpoint, which reads {name!r}; refusing to write it there (it would "
            "change what the folder is read as): choose an output outside that folder."
        )


def _check_block_options(fmt, ckpt):
    """Raises ValueError (one line) if `ckpt` uses a block option (`qk_norm`, RMSNorm, projections
    without bias) that `fmt` does not record: it would be read back as another model."""
    from keras_vit.config.vit_config import ViTConfig

    architecture = ckpt.architecture()
    refused = [name for name in BLOCK_OPTIONS + AIMV2_OPTIONS + CLIP_OPTIONS + EVA_CLIP_OPTIONS + PE_OPTIONS
               + HEAD_OPTIONS
               if architecture[name] != ViTConfig.__dataclass_fields__[name].default and name not in fmt.block_options]
    if refused:
        used = ", ".join(f"{name}={architecture[name]!r}" for name in refused)
        able = ", ".join(f.option for f in formats.FORMATS if f.write and set(refused) <= set(f.block_options))
        raise ValueError(f"{ckpt.path}: {used} cannot be written as {fmt.name}; formats that record it: {able}.")


def _write(fmt, path, ckpt):
    """Writes the canonical `ckpt` as `fmt`, after checking its shapes (no impossible file) and
    that the disk has room for it (float32); a failed write's error is one line. Rotary
    position embeddings (DINOv3) are refused but by the formats that record them (`writes_rope`)."""
    ckpt.check()
    if ckpt.position_embedding == "rope" and ckpt.rope_form not in (None, "dinov3") and not fmt.writes_rope:
        raise ValueError(f"{ckpt.path}: the {ckpt.rope_form} rotary form (RoPE-ViT, EVA-02) cannot be written as {fmt.name}; "
                         "export with format='timm_eva', or save the model with model.save('x.keras').")
    if (ckpt.position_embedding == "rope" or ckpt.key_bias is False) and not fmt.writes_rope:
        rope = ", ".join(f.option for f in formats.FORMATS if f.writes_rope and f.write)
        raise ValueError(
            f"{ckpt.path}: rotary position embeddings / no key bias (DINOv3) cannot be written as {fmt.name}; "
            f"export with format= {rope}, or save the model with model.save('x.keras')."
        )
    if EOMT_QUERIES in ckpt.tensors and not fmt.writes_eomt:
        able = ", ".join(f.option for f in formats.FORMATS if f.writes_eomt and f.write)
        raise ValueError(f"{ckpt.path}: an EoMT segmentation model cannot be written as {fmt.name}; export with "
                         f"format= {able}, or save the model with model.save('x.keras').")
    if ckpt.naflex and not fmt.writes_naflex:
        naflex = ", ".join(f.option for f in formats.FORMATS if f.writes_naflex and f.write)
        raise ValueError(f"{ckpt.path}: a NaFlex model (SigLIP 2) cannot be written as {fmt.name}; "
                         f"export with format= {naflex}, or save the model with model.save('x.keras').")
    _check_block_options(fmt, ckpt)
    check_space(path, sum(4 * math.prod(t.shape) for t in ckpt.tensors.values()))
    with one_line_errors(path):
        fmt.write(path, ckpt)
