"""Evaluation scores of dense predictions, in NumPy: a confusion matrix and its mIoU, per-class IoU and
pixel accuracy (segmentation); AbsRel, RMSE and δ1 (depth). Computed image by image at each image's
own size, by `keras_vit.evaluation.dense`."""

import numpy as np

from keras_vit.dense.labels import IGNORE


def confusion_matrix(labels, predictions, num_classes, ignore_class=IGNORE):
    """`(num_classes, num_classes)` int64 counts, row: the label, column: the prediction, of the
    pixels whose label is not `ignore_class`."""
    labels, predictions = np.asarray(labels).reshape(-1), np.asarray(predictions).reshape(-1)
    if labels.shape != predictions.shape:
        raise ValueError(f"{labels.size} labels for {predictions.size} predictions.")
    keep = labels != ignore_class
    index = labels[keep].astype(np.int64) * num_classes + predictions[keep].astype(np.int64)
    return np.bincount(index, minlength=num_classes * num_classes).reshape(num_classes, num_classes)


def segmentation_scores(confusion):
    """`{"miou", "pixel_accuracy", "iou": [per class; None for a class neither labelled nor
    predicted]}`; the mean is over the classes with an IoU (mmseg's `nanmean`)."""
    confusion = np.asarray(confusion, np.float64)
    right = np.diag(confusion)
    union = confusion.sum(0) + confusion.sum(1) - right
    iou = np.where(union > 0, right / np.maximum(union, 1), np.nan)
    return {"miou": float(np.nanmean(iou)) if np.any(union > 0) else float("nan"),
            "pixel_accuracy": float(right.sum() / max(confusion.sum(), 1)),
            "iou": [None if np.isnan(v) else float(v) for v in iou]}


def depth_errors(target, prediction):
    """`{"abs_rel", "rmse", "delta1"}` of one depth map over its measured pixels (target > 0), or
    None where none is."""
    target, prediction = np.asarray(target, np.float64), np.asarray(prediction, np.float64)
    valid = target > 0
    if not valid.any():
        return None
    t, p = target[valid], np.maximum(prediction[valid], 1e-6)
    return {"abs_rel": float(np.mean(np.abs(t - p) / t)), "rmse": float(np.sqrt(np.mean((t - p) ** 2))),
            "delta1": float(np.mean(np.maximum(t / p, p / t) < 1.25))}


def mean_depth_errors(errors):
    """The mean over images of `depth_errors` (the images without a measured pixel left out)."""
    errors = [e for e in errors if e is not None]
    return {key: float(np.mean([e[key] for e in errors])) for key in ("abs_rel", "rmse", "delta1")} if errors else {}
