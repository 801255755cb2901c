"""Text towers and image-text models (CLIP, SigLIP, SigLIP 2): a Keras text transformer built from
`keras_vit.layers`, the families' tokenizers read from a checkpoint's own files, the readers of
their text weights, and `ImageTextModel` (both towers, zero-shot classification). Names are
imported on first use (the command line imports `keras_vit.text.commands` without Keras)."""

from keras_vit.utils.lazy_imports import lazy_package

lazy_package(
    __name__,
    {
        "ImageTextModel": "keras_vit.text.image_text",
        "TextConfig": "keras_vit.text.config",
        "text_from_checkpoint": "keras_vit.text.model",
        "text_transformer": "keras_vit.text.model",
        "tokenizer_from_folder": "keras_vit.text.tokenizers",
    },
)
