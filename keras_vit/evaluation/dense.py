"""`keras-vit evaluate` of a dense model (segmentation or depth) on a data folder or tensorflow-datasets
source, at each image's own size.

Whole image (`eval_window="whole"`, the default): each image is resized whole to the model's input
size (bilinear, antialiased: as the validation of training). Sliding window (`"slide"`, mmseg's slide
mode): its shorter side is resized to the window (the model's size) and windows `stride` apart cover
it, their outputs averaged where they overlap (`keras_vit.dense.sliding`). Either way the prediction
(class logits or depth) is resized back to the image's size (bilinear) and scored there against the
image's own target (`keras_vit.dense.scores`): for segmentation one confusion matrix over all
labelled pixels (mIoU, per-class IoU, pixel accuracy); for depth AbsRel, RMSE and δ1 over each
image's measured pixels, averaged over the images.
"""

import os

import numpy as np

from keras_vit.dense.data import check_depth_scale
from keras_vit.dense.sources import load_source, source_options
from keras_vit.dense.eomt import OUTPUTS
from keras_vit.dense.eomt_postprocess import semantic_scores
from keras_vit.dense.scores import confusion_matrix, depth_errors, mean_depth_errors, segmentation_scores
from keras_vit.config.fields import check_count
from keras_vit.run_folder import load_keras_file, metadata

DENSE_TASKS = ("semantic", "depth")
WINDOWS = ("whole", "slide")


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


def recorded_config(model_path):
    """The `config.json` of the run `model_path` belongs to (`{}` without one)."""
    return metadata(model_path).get("config", {}) if os.path.isfile(model_path) else {}


def recorded_dense_source(model_path, task, data=None, **options):
    """The `DenseSource` of `data`, by default the data its run recorded, read with the run's held-out
    fraction, seed, depth scale and tensorflow-datasets options (`options` override them)."""
    config = recorded_config(model_path)
    data = data or config.get("data")
    if data is None:
        raise ValueError(f"No --data given and no config.json next to {model_path} saying which folder it was "
                         "trained on.")
    return load_source(data, task, **{**source_options(config), **{k: v for k, v in options.items() if v is not None}})


def window_plan(model, config, sliding_window=None, window=None, stride=None):
    """`(window, stride or None)`: the size the model takes and, for sliding-window evaluation (as
    given, else as the run's `eval_window` says), the step between windows (as given, else the run's
    `eval_stride`, else 2/3 of the window)."""
    slide = config.get("eval_window", "whole") == "slide" if sliding_window is None else bool(sliding_window)
    size = tuple(model.inputs[0].shape[1:3])
    if None in size:
        if window is None:
            raise ValueError(f"The model takes {tuple(model.inputs[0].shape[1:])} images; give the size it is to "
                             "see (--window N).")
        size = (window, window)
    elif window is not None and size != (window, window):
        raise ValueError(f"--window {window}: the model takes {size[0]}x{size[1]} images; a window is its size.")
    if size[0] != size[1] and slide:
        raise ValueError(f"Sliding-window evaluation takes square windows; the model takes {size[0]}x{size[1]}.")
    if not slide:
        if stride is not None:
            raise ValueError(f"--stride {stride} is the step of --sliding-window.")
        return size, None
    stride = stride or config.get("eval_stride") or max(1, 2 * size[0] // 3)
    check_count("stride", stride, "pixels between windows")
    if stride > size[0]:
        raise ValueError(f"--stride {stride} is larger than the window {size[0]}: pixels between windows would not "
                         "be predicted.")
    return size, stride


def predictions(model, pairs, task, batch_size, size, stride=None):
    """Yields `(prediction at the image's size, target)` of each `(uint8 image, target)` of `pairs`:
    class ids (semantic) or depth, from the model run on the whole image resized to `size`, or with
    `stride` on windows of `size` over the image whose shorter side is resized to it."""
    from keras_vit.data import augment
    from keras_vit.dense.sliding import short_side_size, slide

    def run(images):
        outputs = model.predict_on_batch(images)
        if isinstance(outputs, dict):  # EoMT: its class scores per pixel, as its post-processing
            outputs = np.transpose(semantic_scores(outputs, images.shape[1:3]), (0, 2, 3, 1))
        return np.asarray(outputs, np.float32)

    def back(output, shape):
        output = output if task == "semantic" else output[..., None]
        resized = augment.resize(output, shape).numpy()
        return resized.argmax(-1) if task == "semantic" else resized[..., 0]

    batch = []
    for image, target in pairs:
        if stride is not None:
            scaled = augment.scale_to_unit(augment.resize(image, short_side_size(*image.shape[:2], size[0]))).numpy()
            yield back(slide(run, scaled, size[0], stride, batch_size), target.shape), target
            continue
        batch.append((augment.scale_to_unit(augment.resize(image, size)).numpy(), target))
        if len(batch) == batch_size:
            yield from ((back(o, t.shape), t) for o, (_, t) in zip(run(np.stack([i for i, _ in batch])), batch))
            batch = []
    if batch:
        yield from ((back(o, t.shape), t) for o, (_, t) in zip(run(np.stack([i for i, _ in batch])), batch))


def evaluate_dense(model_path, data=None, *, split="validation", batch_size=16, model=None, sliding_window=None,
                   window=None, stride=None, depth_scale=None, data_dir=None):
    """The scores of the dense model at `model_path` (or `model`) on a split of `data` (default: its
    run's data and split): `{"task", "examples", "miou", "pixel_accuracy", "iou", "class_names"}`
    (segmentation) or `{"task", "examples", "abs_rel", "rmse", "delta1"}` (depth). `sliding_window`
    (None: as the run's `eval_window` says), `window` (the model's size) and `stride` (None: the run's
    `eval_stride`, else 2/3 of the window) choose the windows; `depth_scale` (None: the run's) and
    `data_dir` how the data is read."""
    from keras_vit.dense.pipeline import loaded

    check_count("batch_size", batch_size, "images evaluated at a time")
    check_depth_scale(depth_scale)
    task, model = dense_task(model_path, model)
    if task is None:
        raise ValueError(f"{model_path} is not a dense model (its output is {model.output_shape}).")
    if depth_scale is not None and task != "depth":
        raise ValueError(f"--depth-scale is for a depth model; {model_path} segments.")
    config = recorded_config(model_path)
    size, stride = window_plan(model, config, sliding_window, window, stride)
    source = recorded_dense_source(model_path, task, data, depth_scale=depth_scale, data_dir=data_dir)
    pairs = loaded(source, "validation" if split == "validation" else "train").as_numpy_iterator()
    result = {"task": task, "examples": source.validation_size if split == "validation" else source.train_size,
              "window": None if stride is None else f"{size[0]} px windows {stride} px apart"}
    outputs = predictions(model, pairs, task, batch_size, size, stride)
    if task == "depth":
        return {**result, **mean_depth_errors([depth_errors(t, p) for p, t in outputs])}
    output = model.output
    classes = output[OUTPUTS[0]].shape[-1] - 1 if isinstance(output, dict) else model.output_shape[-1]
    if source.num_classes > classes:
        raise ValueError(f"The model predicts {classes} classes, the masks of {source.name} hold ids up to "
                         f"{source.num_classes - 1}.")
    confusion = np.zeros((classes, classes), np.int64)
    for predicted, target in outputs:
        confusion += confusion_matrix(target, predicted, classes)
    names = source.class_names + [str(i) for i in range(len(source.class_names), classes)]
    return {**result, **segmentation_scores(confusion), "class_names": names}


def report(model_path, results, data):
    """The lines `keras-vit evaluate` prints for `results` of `evaluate_dense`."""
    where = f"{results['examples']} images of {data}" if data else f"{results['examples']} images"
    where += f" (sliding: {results['window']})" if results["window"] else ""
    if results["task"] == "depth":
        return [f"{model_path} on {where}, each at its own size: AbsRel {results['abs_rel']:.4f}, "
                f"RMSE {results['rmse']:.4f}, delta1 {results['delta1']:.4f}"]
    lines = [f"{model_path} on {where}, each at its own size: mIoU {results['miou']:.4f}, "
             f"pixel accuracy {results['pixel_accuracy']:.4f}; IoU per class:"]
    width = max(len(name) for name in results["class_names"])
    lines += [f"  {name:<{width}}  {'-' if iou is None else f'{iou:.4f}'}"
              for name, iou in zip(results["class_names"], results["iou"])]
    return lines
