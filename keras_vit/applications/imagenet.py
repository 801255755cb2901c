"""ImageNet pre-processing and class names, kept here for existing importers; they live in
`keras_vit.imagenet`."""

from keras_vit.imagenet import decode_predictions, imagenet_classes, preprocess_input

__all__ = ["decode_predictions", "imagenet_classes", "preprocess_input"]
