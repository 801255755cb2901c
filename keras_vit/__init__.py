"""keras_vit: the Vision Transformer (Dosovitskiy et al., 2021) for Keras 3.

Runs on TensorFlow, JAX and PyTorch; the backend is chosen with `KERAS_BACKEND`.
"""

from keras_vit import layers
from keras_vit.applications import (
    VARIANTS,
    ViTB16,
    ViTB32,
    ViTH14,
    ViTL16,
    ViTL32,
    ViTS16,
    ViTS32,
    ViTTi16,
    VisionTransformer,
    decode_predictions,
    preprocess_input,
)

__version__ = "0.1.0"

__all__ = [
    "VARIANTS",
    "ViTB16",
    "ViTB32",
    "ViTH14",
    "ViTL16",
    "ViTL32",
    "ViTS16",
    "ViTS32",
    "ViTTi16",
    "VisionTransformer",
    "decode_predictions",
    "layers",
    "preprocess_input",
]
