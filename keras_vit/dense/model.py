"""`DenseModel`: a dense-prediction head on any keras_vit backbone, as one plain `keras.Model`."""

import inspect

import keras

from keras_vit.dense.eomt import eomt_model
from keras_vit.dense.layers import TASKS, DPTHead, LinearHead
from keras_vit.model.vision_transformer_model import VisionTransformerModel
from keras_vit.inspect.features import block_indices, feature_extractor
from keras_vit.inspect.model_parts import embedding_layer, encoder_layer, has_class_token, is_naflex, prefix_tokens

HEADS = {"linear": LinearHead, "dpt": DPTHead}
# The head options `DenseModel` sets itself from the backbone and its own arguments.
_SET_HERE = ("self", "task", "num_classes", "num_prefix_tokens", "kwargs")


def default_blocks(head, depth):
    """The blocks a head reads by default: the last (linear), or four evenly spaced ending with the
    last (DPT's `backbone_out_indices` 2, 5, 8, 11 of 12 blocks)."""
    if head == "linear":
        return [depth - 1]
    return [max(depth * k // 4 - 1, 0) for k in (1, 2, 3, 4)]


def head_options(head):
    """The keyword options of `head`'s layer that `DenseModel` passes on."""
    names = inspect.signature(HEADS[head].__init__).parameters
    return tuple(n for n in names if n not in _SET_HERE)


def DenseModel(backbone, head="linear", task="semantic", num_classes=None, *, layers=None, norm=True, name=None,
               **options):
    """A `keras.Model` from images to dense predictions: `(batch, H, W, num_classes)` logits
    (`task="semantic"`) or `(batch, H, W)` depth (`task="depth"`), H x W the input's size.

    Args:
        backbone: a keras_vit Vision Transformer (any family and size, plain or hybrid; not NaFlex),
            built with `include_top=False`, `pooling=None`; its layers and weights are shared.
            `input_shape=(None, None, 3)` gives a model that takes any size (a multiple of the patch size).
        head: "linear" (DINOv2 / DINOv3 linear evaluation: BatchNorm + 1x1 convolution, `LinearHead`),
            "dpt" (DPT / Depth Anything's reassemble and fusion neck with its head, `DPTHead`) or "eomt"
            (EoMT: learned queries joined to the last blocks, semantic only; its options `num_queries`,
            `num_blocks`, `num_upscale_blocks`, `masked_attention`: `keras_vit.dense.eomt.eomt_model`,
            whose outputs are a dict of class and mask logits).
        task: "semantic" or "depth".
        num_classes: the classes of a semantic head (required there, not given for depth).
        layers: the encoder blocks the head reads (indices as `keras_vit.features`'); default: the
            last one (linear; `layers=[-4, -3, -2, -1]` is DINOv2's `linear4` / `ms`), four evenly
            spaced (dpt: 2, 5, 8, 11 of 12 blocks).
        norm: apply the encoder's final LayerNorm to those blocks' tokens (DINOv2's
            `get_intermediate_layers(norm=True)`, transformers' `apply_layernorm`).
        name: the model's name (default `"<backbone>_<head>_<task>"`).
        options: the head layer's options: `class_token` (linear: each block's class token beside
            its patch tokens, default False as DINOv2's segmentation heads), and for "dpt" `readout` (default "project"
            with a class token, else "ignore"), `neck_hidden_sizes`, `reassemble_factors`,
            `fusion_hidden_size`, `fusion_resize`, `fusion_batch_norm`, `fusion_bias`,
            `head_hidden_size`, `head_upsample`, `head_in_index`,
            `depth_activation`, `max_depth` (see `DPTHead`; defaults: transformers' `DPTConfig`).
    """
    if head == "eomt":  # its queries join the last encoder blocks: a model of its own (`keras_vit.dense.eomt`)
        if task != "semantic" or layers is not None or not norm:
            raise ValueError("head='eomt' segments (task='semantic') from the queries it joins to the last blocks; "
                             "layers= and norm= are not its options.")
        return eomt_model(backbone, num_classes, name=name, **options)
    if head not in HEADS:
        raise ValueError(f"Unknown head {head!r}; expected one of {(*HEADS, 'eomt')}.")
    if task not in TASKS:
        raise ValueError(f"Unknown task {task!r}; expected one of {TASKS}.")
    if task == "semantic" and num_classes is None:
        raise ValueError("task='semantic' needs num_classes= (the number of classes to predict per pixel).")
    if task == "depth" and num_classes is not None:
        raise ValueError(f"num_classes={num_classes!r}: task='depth' predicts one value per pixel; leave it out.")
    if is_naflex(backbone):
        raise ValueError("A NaFlex backbone has one patch grid per image; dense heads need one per batch: "
                         "build the backbone with naflex=False.")
    unknown = sorted(set(options) - set(head_options(head)))
    if unknown:
        raise ValueError(f"Unknown option(s) {unknown} of head={head!r}; expected some of {head_options(head)}.")
    encoder = encoder_layer(backbone)
    blocks = default_blocks(head, encoder.depth) if layers is None else block_indices(layers, encoder.depth)
    class_token = has_class_token(backbone)
    options.setdefault("class_token", head == "dpt" and class_token)
    if options["class_token"] and not class_token:
        raise ValueError("class_token=True: the backbone has no class token.")
    if head == "dpt":
        options.setdefault("readout", "project" if class_token else "ignore")
    features = feature_extractor(backbone, blocks, norm=norm)
    parts = keras.Model(backbone.input, [*features.outputs, embedding_layer(backbone).output], name="backbone")
    images = keras.Input(backbone.input.shape[1:], name="images")
    *tokens, patch_grid = parts(images)
    layer = HEADS[head](task=task, num_classes=num_classes, num_prefix_tokens=prefix_tokens(backbone),
                        name=f"{head}_head", **options)
    model = VisionTransformerModel(images, layer(tokens, patch_grid, images), name=name or f"{backbone.name}_{head}_{task}")
    model.preprocessing = getattr(backbone, "preprocessing", model.preprocessing)  # saved with it: predict and exports
    return model
