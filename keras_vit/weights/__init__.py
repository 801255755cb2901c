"""Pretrained weights: load every public ViT checkpoint family, export, convert.

- `weights=` of the builders takes None, a named checkpoint (see `list_weights`; "imagenet"
  is the AugReg ImageNet-21k -> ImageNet-1k fine-tune at 224 px), a path to a checkpoint in
  any supported format (original `.npz` and its variants, timm `.safetensors` / `.pth` /
  `.bin`, a Hugging Face transformers folder or file, Keras `.weights.h5` / `.keras`), or
  `PretrainedWeights(source, interpolation="bicubic")`.
- `export(model, path, format)` writes "npz", "timm" or "hf" files; `convert_checkpoint`
  (and `keras-vit convert SRC DST`) converts files without building a model. Both refuse an
  existing output unless `overwrite=True` (`--overwrite`).
- Each checkpoint format is one module of `keras_vit.weights.formats`, listed in its
  `FORMATS`; hybrid stems plug in through `register_stem(StemLayout(...))` (see `stems`).

Names are imported on first use.
"""

from keras_vit.utils.lazy_imports import lazy_package

lazy_package(
    __name__,
    {
        "Checkpoint": "keras_vit.weights.canonical",
        "read_checkpoint": "keras_vit.weights.reading",
        "DownloadError": "keras_vit.weights.download",
        "fetch": "keras_vit.weights.download",
        "convert_checkpoint": "keras_vit.weights.export",
        "export": "keras_vit.weights.export",
        "model_checkpoint": "keras_vit.weights.export",
        "PretrainedWeights": "keras_vit.weights.loader",
        "build_with_weights": "keras_vit.weights.loader",
        "WeightsEntry": "keras_vit.weights.registry",
        "list_weights": "keras_vit.weights.registry",
        "StemLayout": "keras_vit.weights.stems",
        "register_stem": "keras_vit.weights.stems",
    },
)
