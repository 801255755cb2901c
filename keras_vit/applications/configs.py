"""The ViT variants, kept here for existing importers; they live in `keras_vit.architecture`."""

from keras_vit.architecture import VARIANTS, variant

__all__ = ["VARIANTS", "variant"]
