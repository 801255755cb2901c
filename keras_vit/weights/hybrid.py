"""The numerical convention of the hybrid R50+ViT-B/16's checkpoints (its stem's key rows are
in the format modules' tables, its named checkpoints are rows of `registry.ENTRIES`).

Kernels are stored raw in every layout: `WeightStandardizedConv2D` standardises them at run
time, as the original does. The original and timm standardise slightly differently (see
`keras_vit.layers.resnet`), so `R50ViTB16(weights=...)` builds its stem with the convention of
the checkpoint's source (`stem_numerics`).
"""

import os

from keras_vit.layers.resnet import ORIGINAL_NUMERICS, TIMM_NUMERICS
from keras_vit.weights import containers, formats, registry
from keras_vit.weights.canonical import Checkpoint
from keras_vit.weights.loader import PretrainedWeights
from keras_vit.weights.stems import BIT_RESNET


def stem_numerics(weights):
    """The stem convention (`ORIGINAL_NUMERICS` or `TIMM_NUMERICS`) of the checkpoint that
    `weights` (a name, a path or `PretrainedWeights`) refers to: timm's for timm files,
    the original's otherwise. Reads only the file's key names."""
    source = weights.source if isinstance(weights, PretrainedWeights) else weights
    if isinstance(source, Checkpoint):
        name = source.format
    elif isinstance(source, os.PathLike) or (isinstance(source, str) and os.path.exists(source)):
        fmt = formats.detect(containers.open_checkpoint(source))
        name = fmt.name if fmt else None
    elif isinstance(source, str):
        name = "timm" if registry.find(source, BIT_RESNET.variant).container == "safetensors" else "original"
    else:
        name = None
    return dict(TIMM_NUMERICS if name == "timm" else ORIGINAL_NUMERICS)
