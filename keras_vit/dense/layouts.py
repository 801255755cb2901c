"""The transformers layouts of dense models whose backbone is a DINOv2 (`Dinov2Backbone`):
`DepthAnythingForDepthEstimation` (v1 / v2, relative and metric) and `DPTForDepthEstimation`
(`is_hybrid=False` with a `backbone_config`). Their `config.json` as `DenseModel` arguments, and the
key table of their neck and head: transformers' names <-> the `DPTHead` weights' paths (below the
head), which are the canonical names here. No Keras."""

import dataclasses

from keras_vit.weights.table import Row, Table

NECK = "neck.reassemble_stage."
FUSION = "neck.fusion_stage.layers.{n}."
BATCH_NORM = (("gamma", "weight"), ("beta", "bias"), ("moving_mean", "running_mean"), ("moving_variance", "running_var"))


def conv_to_keras(arrays, heads):
    """PyTorch `Conv2d` `(out, in, kh, kw)` -> Keras `(kh, kw, in, out)`; `ConvTranspose2d`
    `(in, out, kh, kw)` -> Keras `Conv2DTranspose` `(kh, kw, out, in)`: the same axes. Bias as is."""
    return [arrays[0].transpose(2, 3, 1, 0), *arrays[1:]]


def conv_to_torch(arrays, heads):
    return [arrays[0].transpose(3, 2, 0, 1), *arrays[1:]]


def linear(arrays, heads):
    """A Dense kernel `(in, out)` <-> PyTorch `(out, in)`, the bias as is."""
    return [arrays[0].transpose(1, 0), *arrays[1:]]


def _conv(ours, theirs, bias=True, optional=False):
    keys = (("kernel", "weight"), ("bias", "bias"))[: 2 if bias else 1]
    return Row(tuple(f"{ours}/{k}" for k, _ in keys), tuple(f"{theirs}.{t}" for _, t in keys),
               conv_to_keras, conv_to_torch, optional)


def _optional_bias(ours, theirs):
    return (Row(f"{ours}/kernel", f"{theirs}.weight", conv_to_keras, conv_to_torch),
            Row(f"{ours}/bias", f"{theirs}.bias", optional=True))


def _batch_norm(ours, theirs):
    return Row(tuple(f"{ours}/{k}" for k, _ in BATCH_NORM), tuple(f"{theirs}.{t}" for _, t in BATCH_NORM), optional=True)


NECK_ROWS = (
    _conv("reassemble_{n}_projection", NECK + "layers.{n}.projection"),
    _conv("reassemble_{n}_resize", NECK + "layers.{n}.resize", optional=True),  # none where the factor is 1
    Row(("readout_{n}/kernel", "readout_{n}/bias"), (NECK + "readout_projects.{n}.0.weight", NECK + "readout_projects.{n}.0.bias"),
        linear, linear, optional=True),
    _conv("neck_conv_{n}", "neck.convs.{n}", bias=False),
    _conv("fusion_{n}_projection", FUSION + "projection"),
    *_optional_bias("fusion_{n}_residual_{j}/conv{c}", FUSION + "residual_layer{j}.convolution{c}"),
    _batch_norm("fusion_{n}_residual_{j}/bn{c}", FUSION + "residual_layer{j}.batch_norm{c}"),
)
DEPTH_ANYTHING_TABLE = Table(NECK_ROWS + tuple(_conv(f"head_conv{c}", f"head.conv{c}") for c in (1, 2, 3)), dense={})
DPT_TABLE = Table(
    NECK_ROWS
    + tuple(_conv(f"head_conv{c}", f"head.head.{k}") for c, k in ((1, 0), (2, 2), (3, 4))),
    dense={},
)


@dataclasses.dataclass(frozen=True)
class DenseLayout:
    """One transformers dense model: its key table and its `config.json` read as `DenseModel`
    arguments (`head_args(config, path)` -> the `DPTHead` options)."""

    name: str
    table: Table
    head_args: callable


def _refuse(path, what):
    raise ValueError(f"{path}: {what}")


def _backbone_config(config, path):
    """The DINOv2 backbone's config; refuses what keras_vit's `DPTHead` does not read."""
    backbone = config.get("backbone_config")
    if not isinstance(backbone, dict) or backbone.get("model_type") != "dinov2":
        kind = backbone.get("model_type") if isinstance(backbone, dict) else None
        _refuse(path, f"its backbone is {kind!r}; keras_vit reads dense models on a DINOv2 backbone (model_type 'dinov2').")
    if backbone.get("reshape_hidden_states"):
        _refuse(path, "backbone_config.reshape_hidden_states=true drops the class token before the neck; keras_vit "
                      "reads the layouts that give the neck the whole sequence (false).")
    return backbone


def blocks(config, path):
    """The encoder blocks the neck reads: `out_indices` k of the backbone are its hidden states
    k, the outputs of blocks k - 1 (0 is the embedding: refused)."""
    backbone = _backbone_config(config, path)
    indices = backbone.get("out_indices")
    if indices is None:
        names = backbone.get("out_features") or []
        indices = [int(n[len("stage"):]) for n in names if n.startswith("stage") and n[5:].isdigit()]
    if not indices or min(indices) < 1:
        _refuse(path, f"backbone_config.out_indices={indices!r}; expected blocks 1.. (hidden states after a block).")
    return [k - 1 for k in indices]


def _neck(config):
    return dict(neck_hidden_sizes=tuple(config["neck_hidden_sizes"]),
                reassemble_factors=tuple(config.get("reassemble_factors", (4, 2, 1, 0.5))),
                fusion_hidden_size=config["fusion_hidden_size"], head_in_index=config.get("head_in_index", -1))


def depth_anything_args(config, path):
    """`DepthAnythingConfig`: no readout, each fusion to the next map's size, the head to the input size."""
    backbone = _backbone_config(config, path)
    if config.get("patch_size", 14) != backbone.get("patch_size", 14):
        _refuse(path, f"patch_size {config.get('patch_size')} differs from the backbone's {backbone.get('patch_size')}.")
    kind = config.get("depth_estimation_type", "relative")
    if kind not in ("relative", "metric"):
        _refuse(path, f"depth_estimation_type={kind!r}; expected 'relative' or 'metric'.")
    return dict(_neck(config), readout="ignore", fusion_resize="next", head_upsample="input",
                head_hidden_size=config.get("head_hidden_size", 32),
                depth_activation="relu" if kind == "relative" else "sigmoid", max_depth=config.get("max_depth", 1))


def dpt_args(config, path):
    """`DPTConfig` on a DINOv2 backbone: the readout, fusions and head up-sampling twice the size."""
    _backbone_config(config, path)
    if config.get("is_hybrid"):
        _refuse(path, "a DPT-Hybrid (is_hybrid=true); keras_vit reads DPT on a DINOv2 backbone.")
    if config.get("hidden_act", "gelu") != "gelu":
        _refuse(path, f"hidden_act={config['hidden_act']!r} of the readout projection; keras_vit's is 'gelu'.")
    if config.get("add_projection"):
        _refuse(path, "add_projection=true (DPT-Hybrid's extra 3x3 convolution before the head); keras_vit reads false.")
    batch_norm = bool(config.get("use_batch_norm_in_fusion_residual", False))
    bias = config.get("use_bias_in_fusion_residual")
    return dict(_neck(config), readout=config.get("readout_type", "project"), fusion_resize="double",
                head_upsample="double", head_hidden_size=32,
                fusion_batch_norm=batch_norm, fusion_bias=not batch_norm if bias is None else bool(bias))


LAYOUTS = {
    "depth_anything": DenseLayout("DepthAnythingForDepthEstimation", DEPTH_ANYTHING_TABLE, depth_anything_args),
    "dpt": DenseLayout("DPTForDepthEstimation", DPT_TABLE, dpt_args),
}


def layout_of(config):
    """The `DenseLayout` of a `config.json`, or None for any other model."""
    return LAYOUTS.get((config or {}).get("model_type"))
