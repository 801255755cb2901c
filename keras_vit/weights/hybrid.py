"""The numerical convention of the hybrid R50+ViT-B/16's checkpoints (the key mapping of its
stem is `bit_stem`, its named checkpoints are rows of `registry.ENTRIES`).

Kernels are stored raw in every layout: `WeightStandardizedConv2D` standardises them at run
time, as the original does. The original and timm standardise slightly differently (see
`keras_vit.layers.resnet`), so `R50ViTB16(weights=...)` builds its stem with the convention of
the checkpoint's source (`stem_numerics`).
"""

import os

from keras_vit.layers.resnet import ORIGINAL_NUMERICS, TIMM_NUMERICS
from keras_vit.weights import registry
from keras_vit.weights.bit_stem import VARIANT
from keras_vit.weights.canonical import Checkpoint
from keras_vit.weights.families import detect_family
from keras_vit.weights.loader import PretrainedWeights
from keras_vit.weights.readers import open_checkpoint


def stem_numerics(weights):
    """The stem convention (`ORIGINAL_NUMERICS` or `TIMM_NUMERICS`) of the checkpoint that
    `weights` (a name, a path or `PretrainedWeights`) refers to: timm's for timm files,
    the original's otherwise. Reads only the file's key names."""
    source = weights.source if isinstance(weights, PretrainedWeights) else weights
    if isinstance(source, Checkpoint):
        family = source.family
    elif isinstance(source, os.PathLike) or (isinstance(source, str) and os.path.exists(source)):
        raw = open_checkpoint(source)
        family = None if raw.container == "keras" else detect_family(raw.tensors)
    elif isinstance(source, str):
        family = "timm" if registry.find(source, VARIANT).format == "safetensors" else "original"
    else:
        family = None
    return dict(TIMM_NUMERICS if family == "timm" else ORIGINAL_NUMERICS)
