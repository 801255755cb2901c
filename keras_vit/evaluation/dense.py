"""`keras-vit evaluate` of a dense model (segmentation or depth) on a data folder, at each image's own size.

Each image is resized whole to the model's input size (bilinear, antialiased: as the validation of
training), the prediction (class logits or depth) resized back to the image's size (bilinear), and
scored there against the image's own target (`keras_vit.dense.scores`): for segmentation one
confusion matrix over all labelled pixels (mIoU, per-class IoU, pixel accuracy); for depth AbsRel,
RMSE and δ1 over each image's measured pixels, averaged over the images.
"""

import os

import numpy as np

from keras_vit.dense.data import load_dense_source
from keras_vit.dense.eomt import OUTPUTS
from keras_vit.dense.eomt_postprocess import semantic_scores
from keras_vit.dense.scores import confusion_matrix, depth_errors, mean_depth_errors, segmentation_scores
from keras_vit.config.fields import check_count
from keras_vit.run_folder import load_keras_file, metadata

DENSE_TASKS = ("semantic", "depth")


def dense_task(model_path, model=None):
    """`(task, model)`: "semantic" / "depth" as the run of `model_path` recorded (classes.json) or
    as the model's output says (`(batch, H, W, classes)` / `(batch, H, W)`), and the model loaded
    (`model` if given); `(None, model or None)` for a classifier."""
    recorded = metadata(model_path).get("classes", {}).get("task") if os.path.isfile(model_path) else None
    if recorded is None and not (os.path.isfile(model_path) and model_path.endswith(".keras")):
        return None, model
    model = model or load_keras_file(model_path)
    if isinstance(model.output, dict):  # EoMT's class and mask logits
        return ("semantic" if set(OUTPUTS) <= set(model.output) else None), model
    task = recorded or {4: "semantic", 3: "depth"}.get(len(model.output_shape))
    return task if task in DENSE_TASKS else None, model


def recorded_dense_source(model_path, task, data=None):
    """The `DenseSource` of `data`, by default the folder, held-out fraction and seed its run recorded."""
    config = metadata(model_path).get("config", {}) if os.path.isfile(model_path) else {}
    data = data or config.get("data")
    if data is None:
        raise ValueError(f"No --data given and no config.json next to {model_path} saying which folder it was "
                         "trained on.")
    return load_dense_source(data, task, val_fraction=config.get("val_fraction"), seed=config.get("seed", 0))


def predictions(model, pairs, task, batch_size):
    """Yields `(prediction at the image's size, target)` of each `(image, target)` pair: class ids
    (semantic) or depth, from the model run on the whole image resized to its input size."""
    import tensorflow as tf

    from keras_vit.data import augment
    from keras_vit.dense.pipeline import load_pair

    size = tuple(model.inputs[0].shape[1:3])
    if None in size:
        raise ValueError(f"The model takes {tuple(model.inputs[0].shape[1:])} images; evaluation needs a fixed size.")
    for first in range(0, len(pairs), batch_size):
        loaded = [load_pair(*pair, task) for pair in pairs[first:first + batch_size]]
        batch = tf.stack([augment.scale_to_unit(augment.resize(image, size)) for image, _ in loaded])
        outputs = model.predict_on_batch(batch.numpy())
        if isinstance(outputs, dict):  # EoMT: its class scores per pixel, as its post-processing
            outputs = np.transpose(semantic_scores(outputs, size), (0, 2, 3, 1))
        outputs = np.asarray(outputs, np.float32)
        for output, (_, target) in zip(outputs, loaded):
            target = target.numpy()
            output = output if task == "semantic" else output[..., None]
            back = augment.resize(output, target.shape).numpy()
            yield (back.argmax(-1) if task == "semantic" else back[..., 0]), target


def evaluate_dense(model_path, data=None, *, split="validation", batch_size=16, model=None):
    """The scores of the dense model at `model_path` (or `model`) on a split of `data` (default: its
    run's folder and split): `{"task", "examples", "miou", "pixel_accuracy", "iou", "class_names"}`
    (segmentation) or `{"task", "examples", "abs_rel", "rmse", "delta1"}` (depth)."""
    check_count("batch_size", batch_size, "images evaluated at a time")
    task, model = dense_task(model_path, model)
    if task is None:
        raise ValueError(f"{model_path} is not a dense model (its output is {model.output_shape}).")
    source = recorded_dense_source(model_path, task, data)
    pairs = source.validation if split == "validation" else source.train
    result = {"task": task, "examples": len(pairs)}
    if task == "depth":
        return {**result, **mean_depth_errors([depth_errors(t, p) for p, t in predictions(model, pairs, task, batch_size)])}
    output = model.output
    classes = output[OUTPUTS[0]].shape[-1] - 1 if isinstance(output, dict) else model.output_shape[-1]
    if source.num_classes > classes:
        raise ValueError(f"The model predicts {classes} classes, the masks of {source.name} hold ids up to "
                         f"{source.num_classes - 1}.")
    confusion = np.zeros((classes, classes), np.int64)
    for predicted, target in predictions(model, pairs, task, batch_size):
        confusion += confusion_matrix(target, predicted, classes)
    names = source.class_names + [str(i) for i in range(len(source.class_names), classes)]
    return {**result, **segmentation_scores(confusion), "class_names": names}


def report(model_path, results, data):
    """The lines `keras-vit evaluate` prints for `results` of `evaluate_dense`."""
    where = f"{results['examples']} images of {data}" if data else f"{results['examples']} images"
    if results["task"] == "depth":
        return [f"{model_path} on {where}, each at its own size: AbsRel {results['abs_rel']:.4f}, "
                f"RMSE {results['rmse']:.4f}, delta1 {results['delta1']:.4f}"]
    lines = [f"{model_path} on {where}, each at its own size: mIoU {results['miou']:.4f}, "
             f"pixel accuracy {results['pixel_accuracy']:.4f}; IoU per class:"]
    width = max(len(name) for name in results["class_names"])
    lines += [f"  {name:<{width}}  {'-' if iou is None else f'{iou:.4f}'}"
              for name, iou in zip(results["class_names"], results["iou"])]
    return lines
