"""`from_checkpoint`: the model of any supported checkpoint, a Vision Transformer or, for a
transformers Depth Anything / DPT folder (`keras_vit.dense.layouts`), an EoMT folder or a DINOv2
linear segmentation head file on a given backbone (`keras_vit.dense.dinov2_heads`), the whole dense model."""

import os

from keras_vit.applications.from_checkpoint import vit_of_checkpoint
from keras_vit.applications.vision_transformer import VisionTransformer
from keras_vit.dense import dinov2_heads
from keras_vit.dense.eomt import eomt_of_checkpoint
from keras_vit.dense.layouts import blocks, layout_of
from keras_vit.dense.model import DenseModel
from keras_vit.inspect.model_parts import embedding_layer, encoder_layer
from keras_vit.weights import containers, download, registry
from keras_vit.weights.download import DownloadError
from keras_vit.weights.formats.eomt import split_head
from keras_vit.weights.reading import read_raw, weights_checkpoint

BACKBONE = "backbone."
CONFIG_FILE = "config.json"


def from_checkpoint(source, force_download=False, *, backbone=None, **builder_args):
    """Builds the model that `source` (a checkpoint path, folder or name) holds, with its weights.

    A transformers `DepthAnythingForDepthEstimation` or `DPTForDepthEstimation` (DINOv2 backbone)
    gives the whole `DenseModel`, images -> `(batch, H, W)` depth as transformers' `predicted_depth`
    (`builder_args`: the backbone's `VisionTransformer` arguments; by default `input_shape=(None,
    None, 3)`, any multiple of the patch size); an EoMT checkpoint (`EomtForUniversalSegmentation`)
    its whole segmentation model (`keras_vit.dense.eomt`), the builder arguments applying to its
    backbone. A DINOv2 linear segmentation head file (`dinov2_vit*14_*_{linear,ms}_head.pth`, an mmseg
    `BNHead`) needs `backbone=` (a keras_vit model built with `include_top=False`, `pooling=None`, or
    what `from_checkpoint` reads) and gives `DenseModel(backbone, "linear", num_classes=...)` with the
    file's weights (`head_model`). Anything else gives its Vision Transformer: see
    `keras_vit.applications.from_checkpoint.from_checkpoint`. The named dense checkpoints
    (`registry.DENSE`, e.g. "depth_anything_v2_small" or its hub id) are fetched as folders (`fetch_folder`),
    the named head files (e.g. "dinov2_vits14_ade20k_linear_head") as files, put on the backbone of
    `registry.DENSE_BACKBONES` unless `backbone=` gives another.
    """
    entry = dense_entry(source)
    if entry is not None and entry.name in registry.DENSE_BACKBONES:  # a head file, by default on its backbone
        raw = containers.open_checkpoint(download.fetch(entry, force_download))
        backbone = registry.DENSE_BACKBONES[entry.name] if backbone is None else backbone
        return head_model(raw, backbone, **builder_args)
    if entry is not None:
        source = fetch_folder(entry, force_download)
    if isinstance(source, (str, os.PathLike)) and os.path.lexists(source):  # a loop or a broken link: named
        raw = containers.open_checkpoint(source)
        if layout_of(raw.meta.get("config")) is not None:
            return dense_from_raw(raw, **builder_args)
        if dinov2_heads.is_head_file(raw.tensors):
            return head_model(raw, backbone, **builder_args)
    if backbone is not None:
        raise ValueError(f"backbone= is for DINOv2 linear segmentation head files; {source!r} is not one.")
    ckpt, head = split_head(weights_checkpoint(source, num_heads=builder_args.get("num_heads"),
                                               force_download=force_download))
    model = vit_of_checkpoint(ckpt, **builder_args)
    return model if head is None else eomt_of_checkpoint(model, ckpt, head)


def dense_entry(source):
    """The `registry.DENSE` entry named `source` (its name, "Variant/name" or its hub repo id), or None."""
    if not isinstance(source, str) or os.path.exists(source):
        return None
    for entry in registry.DENSE:
        if source in (entry.name, f"{entry.variant}/{entry.name}", registry.hub_repo_id(entry)):
            return entry
    return None


def fetch_folder(entry, force=False):
    """The local folder of a dense entry: its cache folder where `config.json` and the weights file
    were put, else the Hugging Face cache's copy (downloaded if needed); a failed download is one
    line naming where to put the files by hand."""
    folder = os.path.dirname(registry.cache_path(entry))
    names = (CONFIG_FILE, entry.file_name)
    if not force and all(os.path.isfile(os.path.join(folder, n)) for n in names):
        return folder
    repo = registry.hub_repo_id(entry)
    try:
        import huggingface_hub

        paths = [huggingface_hub.hf_hub_download(repo_id=repo, filename=n, **({"force_download": True} if force else {}))
                 for n in names]
    except Exception as error:  # offline, missing package, HTTP errors: all the same advice
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise DownloadError(f"Could not download {repo} ({reason}); to use {entry.name} without downloading it, put its "
                            f"{' and '.join(names)} from https://huggingface.co/{repo} in {folder}.") from None
    return os.path.dirname(paths[-1])


def dense_from_raw(raw, **builder_args):
    """The `DenseModel` of an opened Depth Anything / DPT checkpoint, its weights loaded."""
    config = raw.meta["config"]
    layout = layout_of(config)
    head_args, layers = layout.head_args(config, raw.path), blocks(config, raw.path)
    backbone_raw = containers.RawCheckpoint(
        raw.path, raw.container, {k[len(BACKBONE):]: v for k, v in raw.tensors.items() if k.startswith(BACKBONE)},
        {"config": config["backbone_config"]},
    )
    ckpt = read_raw(backbone_raw)
    args = dict(ckpt.architecture(), include_top=False, pooling=None, input_shape=(None, None, 3), name="dinov2")
    backbone = VisionTransformer(**{**args, **builder_args}, weights=ckpt)
    model = DenseModel(backbone, "dpt", "depth", layers=layers, norm=config["backbone_config"].get("apply_layernorm", True),
                       name=config.get("model_type"), **head_args)
    rest = {k: v for k, v in raw.tensors.items() if not k.startswith(BACKBONE) and not k.endswith("num_batches_tracked")}
    assign(model.get_layer("dpt_head"), layout.table.to_canonical(rest, what=f"{layout.name} {raw.path}"), raw.path)
    return model


def head_model(raw, backbone, num_classes=None, layers=None, class_token=False):
    """The `DenseModel` of an opened DINOv2 linear head file on `backbone` (a model, or a source
    `from_checkpoint` reads, built with any input size), the head's weights loaded. The blocks read:
    `layers`, by default the last `in_channels / width`; `class_token` as `LinearHead`'s."""
    if backbone is None:
        raise ValueError(f"{raw.path} is a DINOv2 linear segmentation head (mmseg BNHead); give the backbone it was "
                         "trained on: from_checkpoint(path, backbone=model or checkpoint), e.g. keras_vit.DINOv2S14("
                         "weights=..., include_top=False, pooling=None, input_shape=(None, None, 3)).")
    if not hasattr(backbone, "get_layer"):
        backbone = from_checkpoint(backbone, include_top=False, pooling=None, input_shape=(None, None, 3))
    tensors = dinov2_heads.head_tensors(raw.tensors, raw.path)
    width, depth = embedding_layer(backbone).output.shape[-1], encoder_layer(backbone).depth
    args = dinov2_heads.head_args(tensors, raw.path, width, depth, num_classes, layers, class_token)
    model = DenseModel(backbone, "linear", "semantic", **args)
    assign(model.get_layer("linear_head"), dinov2_heads.TABLE.to_canonical(tensors, what=raw.path), raw.path)
    return model


def assign(layer, tensors, path):
    """Loads `tensors` (the layer's weight paths below its own name -> lazy arrays) into `layer`;
    one ValueError naming every missing, unexpected or misshapen one."""
    variables = {v.path.split("/", 1)[1]: v for v in layer.weights}
    problems = [f"missing {k!r}" for k in sorted(variables.keys() - tensors.keys())]
    problems += [f"unexpected {k!r}" for k in sorted(tensors.keys() - variables.keys())]
    problems += [f"{k}: checkpoint shape {tuple(tensors[k].shape)}, the model's {tuple(v.shape)}"
                 for k, v in variables.items() if k in tensors and tuple(tensors[k].shape) != tuple(v.shape)]
    if problems:
        raise ValueError(f"{path} does not fit its {layer.name}: " + "; ".join(problems[:8]) + ".")
    for key, variable in variables.items():
        variable.assign(tensors[key].load())
