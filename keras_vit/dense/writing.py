"""Writes a depth `DenseModel` with a DPT head on a DINOv2-style backbone as a transformers folder:
a Depth Anything head (`readout="ignore"`, `fusion_resize="next"`, `head_upsample="input"`) as
`DepthAnythingForDepthEstimation`, DPT's (`fusion_resize="double"`, `head_upsample="double"`, head
width 32, ReLU) as `DPTForDepthEstimation`. The backbone's tensors and config as `Dinov2Backbone`'s
(`keras_vit.weights.formats.hf_families.dinov2_parts`), the head's through the key tables of
`keras_vit.dense.layouts`, which `keras_vit.from_checkpoint` reads back. `keras_vit.weights.export(model,
folder, format="hf")` calls it for such a model."""

import keras
import numpy as np

from keras_vit.dense.layouts import DEPTH_ANYTHING_TABLE, DPT_TABLE
from keras_vit.weights.formats.hf_families import dinov2_parts
from keras_vit.weights.formats.huggingface import hf_preprocessor_config, write_folder
from keras_vit.weights.export import MODEL_WRITERS, model_checkpoint
from keras_vit.weights.lazy import LazyArray

# What a Depth Anything head is (`keras_vit.dense.layouts.depth_anything_args`), and DPT's (`dpt_args`).
DEPTH_ANYTHING = dict(task="depth", readout="ignore", fusion_resize="next", head_upsample="input")
DPT = dict(task="depth", fusion_resize="double", head_upsample="double", head_hidden_size=32, depth_activation="relu")


def _history(tensor):
    """The layer that made a Keras tensor of a functional model, and that call's input tensors."""
    operation, node_index, _ = tensor._keras_history
    return operation, operation._inbound_nodes[node_index].input_tensors


def read_blocks(backbone):
    """`(blocks, norm)`: the encoder blocks the head reads (the backbone sub-model's outputs) and
    whether the final LayerNorm is applied to them."""
    blocks, norms = [], []
    for tensor in backbone.outputs[:-1]:  # the last is the patch embedding's (its shape)
        layer, inputs = _history(tensor)
        norms.append(layer.name == "encoder_norm")
        if norms[-1]:
            layer, _ = _history(inputs[0])
        blocks.append(int(layer.name[len("encoderblock_"):]))
    if len(set(norms)) > 1:
        raise ValueError("The head reads blocks both with and without the final LayerNorm; Depth Anything applies it "
                         "to all or none.")
    return blocks, norms[0]


def _whole(number):
    """An int where `number` is whole (transformers' config types some fields int)."""
    return int(number) if float(number).is_integer() else number


def _is(model, kind):
    names = [layer.name for layer in model.layers]
    if "dpt_head" not in names or "backbone" not in names:
        return False
    head = model.get_layer("dpt_head")
    return all(getattr(head, k) == v for k, v in kind.items())


def is_depth_anything(model):
    return _is(model, DEPTH_ANYTHING)


def _options(kind):
    return ", ".join(f"{k}={v!r}" for k, v in kind.items() if k != "task")


def write_dpt_family(folder, model):
    """Writes a depth `DenseModel` with a DPT head as a `DepthAnythingForDepthEstimation` or
    `DPTForDepthEstimation` folder (module docstring); any other head refused in one line."""
    if is_depth_anything(model):
        return write_dense(folder, model, "depth_anything")
    if _is(model, DPT):
        return write_dense(folder, model, "dpt")
    raise ValueError(f"{model.name}: transformers holds a DenseModel(head='dpt', task='depth') with "
                     f"{_options(DEPTH_ANYTHING)} (Depth Anything) or {_options(DPT)} (DPT).")


def write_dense(folder, model, kind):
    """Writes `model` as a `kind` ("depth_anything" or "dpt") folder."""
    head, backbone = model.get_layer("dpt_head"), model.get_layer("backbone")
    ckpt = model_checkpoint(backbone)
    if not ckpt.layer_scale:
        raise ValueError(f"{model.name}: transformers' Dinov2Backbone has LayerScale; this backbone has none.")
    tensors, backbone_config = dinov2_parts(ckpt)
    blocks, norm = read_blocks(backbone)
    ours = {v.path.split("/", 1)[1]: LazyArray.wrap(np.asarray(keras.ops.convert_to_numpy(v), np.float32), v.path)
            for v in head.weights}
    table = DEPTH_ANYTHING_TABLE if kind == "depth_anything" else DPT_TABLE
    theirs = table.from_canonical(ours, None, f"export of {model.name} to hf")
    backbone_config = {k: v for k, v in backbone_config.items() if k not in ("architectures", "id2label", "label2id")}
    backbone_config.update(out_indices=[b + 1 for b in blocks], out_features=[f"stage{b + 1}" for b in blocks],
                           apply_layernorm=norm, reshape_hidden_states=False)
    neck = {
        "backbone_config": backbone_config,
        "reassemble_factors": [_whole(f) for f in head.reassemble_factors],
        "neck_hidden_sizes": list(head.neck_hidden_sizes),
        "fusion_hidden_size": head.fusion_hidden_size,
        "head_in_index": head.head_in_index,
        "torch_dtype": "float32",
    }
    preprocessor = hf_preprocessor_config(ckpt, "DPTImageProcessor")
    if kind == "depth_anything":
        config = {
            **neck, "architectures": ["DepthAnythingForDepthEstimation"], "model_type": "depth_anything",
            "patch_size": ckpt.patch_size, "reassemble_hidden_size": ckpt.hidden_dim,
            "head_hidden_size": head.head_hidden_size,
            "depth_estimation_type": "relative" if head.depth_activation == "relu" else "metric",
            "max_depth": _whole(head.max_depth),
        }
        preprocessor.update(keep_aspect_ratio=True, ensure_multiple_of=ckpt.patch_size)
    else:  # DPTConfig on a backbone: its hidden_size / patch_size are the backbone's
        config = {
            **neck, "architectures": ["DPTForDepthEstimation"], "model_type": "dpt", "is_hybrid": False,
            "hidden_size": ckpt.hidden_dim, "patch_size": ckpt.patch_size, "readout_type": head.readout,
            "hidden_act": "gelu", "add_projection": False,
            "use_batch_norm_in_fusion_residual": head.fusion_batch_norm, "use_bias_in_fusion_residual": head.fusion_bias,
        }
    write_folder(folder, {**{"backbone." + k: v for k, v in tensors.items()}, **theirs}, config, preprocessor)


MODEL_WRITERS["dpt_head"] = ("hf", write_dpt_family)
