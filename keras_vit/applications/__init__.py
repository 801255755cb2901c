"""Model builders with the `keras.applications` conventions."""

from keras_vit.applications.configs import VARIANTS
from keras_vit.applications.hybrid import R50ViTB16
from keras_vit.imagenet import decode_predictions, preprocess_input
from keras_vit.applications.vision_transformer import (
    ViTB16,
    ViTB32,
    ViTH14,
    ViTL16,
    ViTL32,
    ViTS16,
    ViTS32,
    ViTTi16,
    VisionTransformer,
)

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
    "preprocess_input",
]
