"""transformers' EoMT (`EomtForUniversalSegmentation`, *Your ViT is Secretly an Image Segmentation
Model*, CVPR 2025): a DINOv2-style ViT with registers whose class token has no position embedding
(it gets a zero row here), and the segmentation head of `keras_vit.dense.eomt`: the learned queries,
the class and mask heads, the upscaling blocks and `attn_mask_probs`. `config.json` gives the GELU,
heads, grid and LayerNorm epsilon. `split_head` hands the backbone's tensors to the ViT builder and
the head's to `keras_vit.dense.eomt`. Read only."""

import dataclasses
import functools

from keras_vit.weights.canonical import (
    EOMT, EOMT_CLASS, EOMT_MASK_MLP, EOMT_MASK_PROBS, EOMT_QUERIES, EOMT_UPSCALE, LAYER_SCALE, REG)
from keras_vit.weights.formats.base import Format
from keras_vit.weights.formats.common import linear_row, norm_rows, torch_rows, with_class_row
from keras_vit.weights.formats.hf_families import metadata, qkv_rows
from keras_vit.weights.lazy import concat
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


FORMAT = Format(
    name="hf_eomt", table=TABLE, detect=detect, prepare=prepare,
    metadata=functools.partial(metadata, preprocessing="eomt"), interpolation="bicubic",
)
