"""Zero-shot accuracy of an image-text model (`keras_vit.ImageTextModel`) on an image folder
whose class folder names are the labels."""

import os

import numpy as np

from keras_vit.data.sources import scan_folder
from keras_vit.config.fields import check_count
from keras_vit.text.tokenizers import check_labels


def _unit(features):
    return features / np.linalg.norm(features, axis=-1, keepdims=True)


def evaluate_zero_shot(model, folder, template=None, batch_size=32):
    """`{"examples", "classes", "top1", "top5"}` of `model` (an `ImageTextModel`) on the images
    of `folder/CLASS/IMAGE`: each image's labels ranked by the cosine of its features with those of
    the class names (underscores read as spaces, through `template`'s `{}` when given), the order
    of both families' probabilities."""
    check_count("batch_size", batch_size, "images encoded at a time")
    classes, paths, labels = scan_folder(folder, "skip")
    texts = _unit(model.encode_text(check_labels([name.replace("_", " ") for name in classes], template)))
    top1 = top5 = 0
    for start in range(0, len(paths), batch_size):
        batch = [os.fsdecode(path) for path in paths[start: start + batch_size]]
        ranked = np.argsort(-(_unit(model.encode_image(batch)) @ texts.T), axis=1, kind="stable")
        truth = labels[start: start + batch_size, None]
        top1 += int((ranked[:, :1] == truth).sum())
        top5 += int((ranked[:, :5] == truth).any(axis=1).sum())
    return {"examples": len(paths), "classes": len(classes), "top1": top1 / len(paths), "top5": top5 / len(paths)}
