"""Pretrained weights: load every public ViT checkpoint family, export, convert.

- `weights=` of the builders takes None, a named checkpoint (see `list_weights`; "imagenet"
  is the AugReg ImageNet-21k -> ImageNet-1k fine-tune at 224 px), a path to a checkpoint in
  any supported format (original `.npz` and its variants, timm `.safetensors` / `.pth` /
  `.bin`, a Hugging Face transformers folder or file, Keras `.weights.h5` / `.keras`), or
  `PretrainedWeights(source, interpolation="bicubic")`.
- `export(model, path, format)` writes "npz", "timm" or "hf" files; `convert_checkpoint`
  (and `keras-vit convert SRC DST`) converts files without building a model. Both refuse an
  existing output unless `overwrite=True` (`--overwrite`).
- Hybrid stems plug in through `register_stem(StemLayout(...))` (see `stems`).
"""

from keras_vit.weights import hybrid  # registers the R50 stem layout and its checkpoints
from keras_vit.weights.canonical import Checkpoint, read_checkpoint
from keras_vit.weights.download import DownloadError, fetch
from keras_vit.weights.export import convert_checkpoint, export, model_checkpoint
from keras_vit.weights.loader import PretrainedWeights, build_with_weights
from keras_vit.weights.registry import WeightsEntry, list_weights
from keras_vit.weights.stems import StemLayout, register_stem

__all__ = [
    "Checkpoint",
    "DownloadError",
    "PretrainedWeights",
    "StemLayout",
    "WeightsEntry",
    "build_with_weights",
    "convert_checkpoint",
    "export",
    "fetch",
    "list_weights",
    "model_checkpoint",
    "read_checkpoint",
    "register_stem",
]
