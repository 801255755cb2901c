"""transformers' EoMT (`EomtForUniversalSegmentation`, *Your ViT is Secretly an Image Segmentation
Model*, CVPR 2025): a DINOv2-style ViT with registers whose class token has no position embedding
(it gets a zero row here), and the segmentation head of `keras_vit.dense.eomt`: the learned queries,
the class and mask heads, the upscaling blocks and `attn_mask_probs`. `config.json` gives the GELU,
heads, grid and LayerNorm epsilon. `split_head` hands the backbone's tensors to the ViT builder and
the head's to `keras_vit.dense.eomt`. Written by `export(format="hf")` of an EoMT model (`write`)."""

import dataclasses

import numpy as np

from keras_vit.weights.canonical import (
    EOMT, EOMT_CLASS, EOMT_MASK_MLP, EOMT_MASK_PROBS, EOMT_QUERIES, EOMT_UPSCALE, LAYER_SCALE, REG, Metadata)
from keras_vit.weights.formats.base import Format
from keras_vit.weights.formats.common import linear_row, norm_rows, qkv_rows, torch_rows, with_class_row
from keras_vit.weights.formats.huggingface import common_config, config_grid, gelu, hf_preprocessor_config, write_folder
from keras_vit.weights.lazy import LazyArray, concat
from keras_vit.weights.table import Row, Table, pairs
from keras_vit.weights.transforms import conv_from_canonical, conv_to_canonical

LAYER = "layers.{i}."
UPSCALE = "upscale_block.block.{j}."
POSITION = "embeddings.position_embeddings.weight"


def _queries_to_canonical(arrays, heads):
    """`query.weight` `(queries, width)` -> `(1, queries, width)`."""
    return [arrays[0].reshape(1, *arrays[0].shape)]


def _queries_from_canonical(arrays, heads):
    return [arrays[0].reshape(*arrays[0].shape[1:])]


def _depthwise(arrays, heads):
    """A depthwise convolution `(channels, 1, kh, kw)` <-> `(kh, kw, channels, 1)` (its own inverse)."""
    return [arrays[0].transpose(2, 3, 0, 1)]


TABLE = Table(
    torch_rows(
        "embeddings.patch_embeddings.projection.", "embeddings.cls_token", POSITION, LAYER + "norm1.",
        LAYER + "norm2.", LAYER + "attention.out_proj.", LAYER + "mlp.fc1.", LAYER + "mlp.fc2.", "layernorm.", None, None,
    )
    + qkv_rows(LAYER + "attention.{n}_proj.", ("q", "k", "v"))
    + pairs((LAYER_SCALE[0], LAYER + "layer_scale1.lambda1"), (LAYER_SCALE[1], LAYER + "layer_scale2.lambda1"))
    + pairs((REG, "embeddings.register_tokens"), optional=True)
    + (
        Row(EOMT_QUERIES, "query.weight", _queries_to_canonical, _queries_from_canonical),
        linear_row(EOMT_CLASS, "class_predictor."),
        linear_row(EOMT_MASK_MLP, "mask_head.fc{j+1}."),
        # ConvTranspose2d's `(in, out, kh, kw)` -> Keras' `(kh, kw, out, in)`: the convolution's transpose.
        Row(EOMT_UPSCALE + "conv_transpose/kernel", UPSCALE + "conv1.weight", conv_to_canonical, conv_from_canonical),
        Row(EOMT_UPSCALE + "depthwise/kernel", UPSCALE + "conv2.weight", _depthwise, _depthwise),
    )
    + pairs((EOMT_UPSCALE + "conv_transpose/bias", UPSCALE + "conv1.bias"), (EOMT_MASK_PROBS, "attn_mask_probs"))
    + norm_rows(EOMT_UPSCALE + "LayerNorm_0/", UPSCALE + "layernorm2d.")
)


def metadata(raw, tensors):
    config = raw.meta.get("config") or {}
    return Metadata(approximate_gelu=gelu(config), num_heads=config.get("num_attention_heads"),
                    grid=config_grid(config, raw.path), layer_norm_epsilon=config.get("layer_norm_eps"),
                    preprocessing="eomt", depth=config.get("num_hidden_layers"))


def detect(raw):
    """By `config.json`'s model_type, else (a bare weights file) by the upscaling blocks' keys."""
    model_type = (raw.meta.get("config") or {}).get("model_type")
    if model_type is not None:
        return model_type == "eomt"
    return any(key.startswith("upscale_block.") for key in raw.tensors)


def prepare(raw):
    """Leaves out the loss's class weights and an empty register array, gives the position embeddings a batch axis and a zero
    class-token row (EoMT adds none to its class token), packs a SwiGLU MLP's `gate_proj` and
    `up_proj` as keras_vit's `[gate | value]` (`mlp.fc1`) and names `down_proj` `mlp.fc2`."""
    tensors = {k: v for k, v in raw.tensors.items() if k != "criterion.empty_weight"}
    if 0 in getattr(tensors.get("embeddings.register_tokens"), "shape", (1,)):  # `num_register_tokens=0`
        del tensors["embeddings.register_tokens"]
    if POSITION in tensors and len(tensors[POSITION].shape) == 2:
        tensors[POSITION] = with_class_row(tensors[POSITION].reshape(1, *tensors[POSITION].shape))
    for key in [k for k in tensors if ".mlp.gate_proj." in k]:
        up = key.replace(".gate_proj.", ".up_proj.")
        if up in tensors:  # else the table names the unmatched key
            tensors[key.replace(".gate_proj.", ".fc1.")] = concat([tensors.pop(key), tensors.pop(up)], axis=0)
    return {k.replace(".mlp.down_proj.", ".mlp.fc2."): v for k, v in tensors.items()}


@dataclasses.dataclass(frozen=True)
class Head:
    """The EoMT head of a checkpoint: `keras_vit.dense.eomt.eomt_model`'s arguments (`options`) and
    its canonical tensors (`tensors`, `attn_mask_probs` left out)."""

    options: dict
    tensors: dict


def split_head(ckpt):
    """`(backbone, head)`: `ckpt` without the EoMT head's tensors, and its `Head` (None for a
    checkpoint without one). `attn_mask_probs` must be 0 or 1 per block (a trained model's: 1 attends
    through the predicted masks, 0 not); the fractions of the training schedule are refused."""
    if EOMT_QUERIES not in ckpt.tensors:
        return ckpt, None
    tensors = {k: v for k, v in ckpt.tensors.items() if k.startswith(EOMT)}
    probs = [float(p) for p in tensors.pop(EOMT_MASK_PROBS).load().reshape(-1)]
    if any(p not in (0.0, 1.0) for p in probs):
        raise ValueError(f"{ckpt.path}: attn_mask_probs={probs}; keras_vit runs EoMT with 0 or 1 per block (a trained "
                         "model's: masked attention on or off), not the fractions of the annealing schedule.")
    options = dict(
        num_classes=ckpt.shape(EOMT_CLASS + "kernel")[-1] - 1,
        num_queries=ckpt.shape(EOMT_QUERIES)[1],
        num_blocks=len(probs),
        num_upscale_blocks=sum(k.endswith("/conv_transpose/kernel") for k in tensors),
        masked_attention=tuple(p == 1.0 for p in probs),
    )
    backbone = dataclasses.replace(ckpt, tensors={k: v for k, v in ckpt.tensors.items() if not k.startswith(EOMT)})
    return backbone, Head(options, tensors)


# What an `EomtForUniversalSegmentation` holds (the checkpoint's `architecture()`); anything else is refused.
NEEDS = dict(class_token=True, distillation_token=False, position_embedding="learned", layer_scale_init=1.0,
             fc_norm=False, qkv_bias=True, proj_bias=True, mlp_bias=True, qk_norm=False, norm="layernorm",
             patch_norm=False, representation_size=None, mlp_norm=False)
NO_OBJECT_WEIGHT = 0.1  # EomtConfig's default: the loss's class weights, `criterion.empty_weight`
MAX_MLP_RATIO = 64


def _mlp_ratio(ckpt, swiglu):
    """The whole `mlp_ratio` from which `EomtMLP` (or `EomtSwiGLUFFN`, two thirds rounded up to 8) gets
    the MLP width, or None."""
    width = ckpt.hidden_dim
    for ratio in range(1, MAX_MLP_RATIO + 1):
        hidden = width * ratio
        if (((int(hidden * 2 / 3) + 7) // 8 * 8) if swiglu else hidden) == ckpt.mlp_dim:
            return ratio
    return None


def write(folder, ckpt):
    """An `EomtForUniversalSegmentation` folder: `config.json`, `model.safetensors` (the class token's
    position embedding, which EoMT has none of, must be zero and is left out; SwiGLU's `[gate | value]`
    as `gate_proj` / `up_proj`, an empty register array if none) and an `EomtImageProcessor` config resizing and padding to the model's size."""
    architecture, swiglu = ckpt.architecture(), ckpt.mlp == "swiglu"
    found = {k: architecture[k] if k in architecture else getattr(ckpt, k) for k in NEEDS}
    wrong = [f"{k}={found[k]!r} (EoMT: {v!r})" for k, v in NEEDS.items() if found[k] != v]
    grid, ratio = ckpt.patch_grid, _mlp_ratio(ckpt, swiglu)
    if grid[0] != grid[1]:
        wrong.append(f"a {grid[0]}x{grid[1]} patch grid (EoMT: square)")
    if ratio is None:
        wrong.append(f"an MLP width of {ckpt.mlp_dim} (EoMT: a whole multiple of the width {ckpt.hidden_dim})")
    if ckpt.stem is not None:
        wrong.append(f"a {ckpt.stem.name} stem")
    if wrong:
        raise ValueError(f"Cannot export {ckpt.path} as a transformers EoMT model: it has {', '.join(wrong)}.")
    theirs = FORMAT.from_canonical(ckpt.tensors, ckpt.num_heads, f"export of {ckpt.path} to hf")
    posemb = theirs[POSITION]
    if np.any(posemb.load()[0, 0]):
        raise ValueError(f"Cannot export {ckpt.path} as a transformers EoMT model: its class token has a position "
                         "embedding, EoMT's none.")
    theirs[POSITION] = posemb.reshape(*posemb.shape[1:]).rows(1, posemb.shape[1])
    for key in [k for k in theirs if swiglu and ".mlp.fc" in k]:
        value = theirs.pop(key)
        if ".mlp.fc2." in key:
            theirs[key.replace(".fc2.", ".down_proj.")] = value
            continue
        half = value.shape[0] // 2
        theirs[key.replace(".fc1.", ".gate_proj.")] = value.rows(0, half)
        theirs[key.replace(".fc1.", ".up_proj.")] = value.rows(half, 2 * half)
    theirs.setdefault("embeddings.register_tokens",
                      LazyArray.wrap(np.zeros((1, 0, ckpt.hidden_dim), np.float32), "no register tokens"))
    classes = ckpt.shape(EOMT_CLASS + "kernel")[-1] - 1
    weights = np.append(np.ones(classes, np.float32), np.float32(NO_OBJECT_WEIGHT))
    theirs["criterion.empty_weight"] = LazyArray.wrap(weights, "EoMT's loss class weights")
    config = {
        **common_config(ckpt, "EomtForUniversalSegmentation", "eomt"),
        "mlp_ratio": ratio,
        "use_swiglu_ffn": swiglu,
        "layerscale_value": 1.0,
        "num_register_tokens": ckpt.num_registers,
        "num_queries": ckpt.shape(EOMT_QUERIES)[1],
        "num_blocks": ckpt.shape(EOMT_MASK_PROBS)[0],
        "num_upscale_blocks": sum(k.endswith("/conv_transpose/kernel") for k in ckpt.tensors),
        "no_object_weight": NO_OBJECT_WEIGHT,
        "id2label": {str(i): f"LABEL_{i}" for i in range(classes)},
        "label2id": {f"LABEL_{i}": i for i in range(classes)},
    }
    side = grid[0] * ckpt.patch_size
    preprocessor = {**hf_preprocessor_config(ckpt, "EomtImageProcessor"),
                    "size": {"shortest_edge": side, "longest_edge": side}, "do_pad": True, "do_split_image": False}
    write_folder(folder, theirs, config, preprocessor)


FORMAT = Format(
    name="hf_eomt", table=TABLE, detect=detect, prepare=prepare,
    metadata=metadata, interpolation="bicubic",
)
