"""ImageNet input scaling and label decoding, with the labels shipped in the package."""

import functools
import json
from importlib import resources

import numpy as np


def preprocess_input(x, data_format=None, preprocessing=None):
    """Scales 0-255 RGB pixels as a model's weights expect: `(x / 255 - mean) / std` per channel
    (`keras_vit.preprocessing`). `preprocessing`: a model (its own), a name of
    `keras_vit.preprocessing.PREPROCESSING`, or None: the original ViT code's
    `(x - 127.5) / 127.5`, to [-1, 1].

    Works on NumPy arrays and backend tensors; channels last. `data_format` is accepted for
    `keras.applications` compatibility and ignored.
    """
    del data_format
    from keras import ops

    from keras_vit.preprocessing import preprocessing as lookup

    spec = lookup(preprocessing)
    offset, scale = (np.asarray(v, np.float32) for v in (spec.offset, spec.scale))
    if isinstance(x, np.ndarray):
        return (x.astype(np.float32) - offset) / scale
    return (ops.cast(x, "float32") - offset) / scale


@functools.lru_cache(maxsize=1)
def imagenet_classes():
    """The 1000 ImageNet-2012 classes as a list of `(wordnet_id, name)`."""
    text = resources.files("keras_vit").joinpath("imagenet_classes.json").read_text()
    index = json.loads(text)
    return [tuple(index[str(i)]) for i in range(len(index))]


def decode_predictions(preds, top=5):
    """Top-`top` ImageNet classes per example: a list of lists of `(wordnet_id, name, score)`."""
    from keras import ops

    preds = np.asarray(ops.convert_to_numpy(preds))
    classes = imagenet_classes()
    if preds.ndim != 2 or preds.shape[1] != len(classes):
        raise ValueError(
            f"decode_predictions expects a batch of ImageNet predictions of shape "
            f"(samples, {len(classes)}), got {preds.shape}."
        )
    results = []
    for row in preds:
        best = np.argsort(row)[::-1][:top]
        results.append([(*classes[i], float(row[i])) for i in best])
    return results
