"""Model builders with the `keras.applications` conventions (imported on first use)."""

from keras_vit.families import FAMILIES, VARIANTS
from keras_vit.utils.lazy_imports import lazy_package

_EXPORTS = {
    "VARIANTS": "keras_vit.variants",
    "R50ViTB16": "keras_vit.applications.hybrid",
    "named_builder": "keras_vit.applications.vision_transformer",
    **dict.fromkeys(FAMILIES, "keras_vit.applications.families"),
    "decode_predictions": "keras_vit.data.imagenet",
    "preprocess_input": "keras_vit.data.imagenet",
    **dict.fromkeys([*VARIANTS, "VisionTransformer"], "keras_vit.applications.vision_transformer"),
}
lazy_package(__name__, _EXPORTS)
