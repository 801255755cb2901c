"""Post-training quantization of a ViT with Keras' own `model.quantize` (every `Linear` of
the encoder and the head; the patch embedding's convolution stays float), and how far it
moves the outputs."""

import warnings

import keras
import numpy as np

MODES = ("int8", "float8", "int4")


def check_mode(mode):
    if mode not in MODES:
        raise ValueError(f"quantize={mode!r}; expected one of {', '.join(MODES)}.")


def quantized_copy(model, mode):
    """A copy of `model` with its dense layers quantized to `mode` (`model` is left as it is)."""
    check_mode(mode)
    copy = keras.models.clone_model(model)
    copy.set_weights(model.get_weights())
    with warnings.catch_warnings():  # Keras warns for each layer without weights to quantize
        warnings.filterwarnings("ignore", message=".*does not have a `quantize` method")
        copy.quantize(mode)
    return copy


def output_error(reference, quantized, images):
    """Largest |quantized - reference| of the two models' outputs on `images`."""
    first = keras.ops.convert_to_numpy(reference(images, training=False))
    second = keras.ops.convert_to_numpy(quantized(images, training=False))
    return float(np.max(np.abs(first - second)))
