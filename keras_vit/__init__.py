"""keras_vit: the Vision Transformer (Dosovitskiy et al., 2021) for Keras 3.

Runs on TensorFlow, JAX and PyTorch; the backend is chosen with `KERAS_BACKEND`.
"""

from keras_vit import layers, weights
from keras_vit.applications import (
    VARIANTS,
    R50ViTB16,
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
from keras_vit.inspect.features import feature_extractor, features
from keras_vit.weights import list_weights

__version__ = "0.1.0"

__all__ = [
    "R50ViTB16",
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
    "feature_extractor",
    "features",
    "layers",
    "list_weights",
    "preprocess_input",
    "weights",
]
