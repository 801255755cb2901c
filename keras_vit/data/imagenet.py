"""ImageNet input scaling and label decoding, with the labels shipped in the package."""

import functools
import gzip
import json
from importlib import resources

import numpy as np

from keras_vit.config.fields import check_count


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
    text = resources.files("keras_vit.data").joinpath("imagenet_classes.json").read_text()
    index = json.loads(text)
    return [tuple(index[str(i)]) for i in range(len(index))]


@functools.lru_cache(maxsize=1)
def imagenet21k_classes():
    """The 21,843 ImageNet-21k classes, in the order of the ViT / AugReg ImageNet-21k heads, as a
    list of `(wordnet_id, name)`. The data: timm's `imagenet21k_goog_synsets.txt` (the order),
    each synset named by the first lemma of its `imagenet_synset_to_lemma.txt` (source line in
    the file's header)."""
    data = resources.files("keras_vit.data").joinpath("imagenet21k_classes.txt.gz").read_bytes()
    lines = gzip.decompress(data).decode().splitlines()
    return [tuple(line.split("\t")) for line in lines if not line.startswith("#")]


LABELS = {1000: imagenet_classes, 21843: imagenet21k_classes}


def check_top(top):
    """Raises a ValueError unless `top` (classes listed per image) is a whole number >= 1."""
    check_count("top", top, "classes listed per image; all of them at most")


def decode_predictions(preds, top=5):
    """Top-`top` classes per example of ImageNet (1000 classes) or ImageNet-21k (21,843: the
    `imagenet21k` heads) predictions: a list of lists of `(wordnet_id, name, score)`."""
    from keras import ops

    check_top(top)
    preds = np.asarray(ops.convert_to_numpy(preds))
    if not (np.issubdtype(preds.dtype, np.number) or preds.dtype == bool):
        raise ValueError(f"decode_predictions expects numbers (scores per class), got an array of {preds.dtype}.")
    if preds.ndim != 2 or preds.shape[1] not in LABELS:
        raise ValueError(
            f"decode_predictions expects a batch of ImageNet predictions of shape "
            f"(samples, 1000) or, ImageNet-21k, (samples, 21843), got {preds.shape}."
        )
    classes = LABELS[preds.shape[1]]()
    results = []
    for row in preds:
        best = np.argsort(row)[::-1][:top]
        results.append([(*classes[i], float(row[i])) for i in best])
    return results
