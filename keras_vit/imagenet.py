"""ImageNet input scaling and label decoding, with the labels shipped in the package."""

import functools
import json
from importlib import resources

import numpy as np


def preprocess_input(x, data_format=None):
    """Scales pixel values from [0, 255] to [-1, 1], as the original ViT code: `(x - 127.5) / 127.5`.

    Works on NumPy arrays and backend tensors; the channel layout is unchanged.
    `data_format` is accepted for `keras.applications` compatibility and ignored.
    """
    del data_format
    from keras import ops

    if isinstance(x, np.ndarray):
        return (x.astype(np.float32) - 127.5) / 127.5
    return (ops.cast(x, "float32") - 127.5) / 127.5


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
