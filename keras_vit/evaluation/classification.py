"""Top-1 / top-5 accuracy of a trained classifier on a data set, with the splits its run
recorded."""

import os

import keras
import numpy as np

from keras_vit.config.fields import check_count
from keras_vit.preprocessing import name_of
from keras_vit.model.logits import ends_with_softmax
from keras_vit.inspect.model_parts import is_naflex, position_layer
from keras_vit.run_folder import load_model, metadata


def square_size(model):
    """The side of `model`'s square input images, or a one-line ValueError for another input."""
    height, width = model.inputs[0].shape[1:3]
    if height is None or height != width:
        raise ValueError(f"The model takes {model.inputs[0].shape[1:]} images; a fixed square size is needed.")
    return int(height)


def naflex_budget(model, model_path=None):
    """The patch budget of a NaFlex `model`'s images: the largest `naflex_seq_lens` of the run
    that saved the file `model_path` (its config.json), as its validation used, else the
    patches of the model's position table."""
    from keras_vit.data.naflex_inputs import check_seq_lens

    if model_path is not None and os.path.isfile(model_path):
        seq_lens = metadata(model_path).get("config", {}).get("naflex_seq_lens")
        if seq_lens:
            return max(check_seq_lens(seq_lens))
    return int(np.prod(position_layer(model).grid_size))


def recorded_source(model_path, data=None, **source_options):
    """The `Source` of `data`, by default the data set, splits and held-out fraction recorded
    with the run of `model_path` (config.json), so that the splits match training's."""
    from keras_vit.data.sources import load_source

    config = metadata(model_path).get("config", {})
    recorded = {} if data else {"data": config.get("data")}
    data = data or config.get("data")
    if data is None:
        raise ValueError(f"No data given and no config.json next to {model_path} saying which data it was trained on.")
    for key in ("data_dir", "manual_dir", "train_split", "val_split", "val_fraction", "seed", "on_corrupt"):
        if key in config and key not in source_options:
            source_options[key] = recorded[key] = config[key]
    try:
        return load_source(data, **source_options)
    except ValueError as error:
        if not recorded:
            raise
        where = os.path.join(os.path.dirname(os.path.abspath(model_path)), "config.json")
        raise ValueError(f"{str(error).rstrip('.')} (as recorded in {where}: {', '.join(sorted(recorded))}).") from None


class Count(keras.metrics.Metric):
    """The number of examples evaluated (those the decoder dropped are not among them)."""

    def __init__(self, name="examples", **kwargs):
        super().__init__(name=name, **kwargs)
        self.count = self.add_variable(shape=(), initializer="zeros", name="count")

    def update_state(self, y_true, y_pred, sample_weight=None):
        self.count.assign_add(keras.ops.cast(keras.ops.shape(y_true)[0], self.count.dtype))

    def result(self):
        return keras.ops.convert_to_tensor(self.count)


def evaluate(model_path, data=None, *, split="validation", batch_size=128, **source_options):
    """Top-1 / top-5 accuracy and loss of a trained model on a split of `data`; `examples`:
    how many were evaluated, `skipped`: how many of the split's files the decoder could not read.

    Without `data` (and `source_options`), the data set, validation split and held-out
    fraction recorded with the run (config.json) are used, so the numbers match training's;
    a NaFlex model sees each image at its aspect ratio under `naflex_budget`.
    """
    from keras_vit.data import naflex, pipeline

    check_count("batch_size", batch_size, "images evaluated at a time")
    model, _, eval_crop = load_model(model_path)
    source = recorded_source(model_path, data, **source_options)
    classes = model.output_shape[-1]
    if classes != source.num_classes:
        raise ValueError(f"The model predicts {classes} classes, {source.name!r} has {source.num_classes}.")
    if is_naflex(model):  # each image at its aspect ratio, under the run's budget
        patch = model.get_layer("embedding").patch_size
        ds = naflex.eval_dataset(source, batch_size, patch, naflex_budget(model, model_path), preprocessing=model,
                                 split=split)
    else:
        ds = pipeline.eval_dataset(source, square_size(model), batch_size, crop_fraction=eval_crop, split=split,
                                   preprocessing=name_of(model))
    model.compile(
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=not ends_with_softmax(model)),
        metrics=[
            keras.metrics.SparseCategoricalAccuracy(name="top1"),
            keras.metrics.SparseTopKCategoricalAccuracy(min(5, classes), name="top5"),
            Count(),
        ],
    )
    results = model.evaluate(ds, verbose=0, return_dict=True)
    size = source.validation_size if split == "validation" else source.train_size
    examples = int(round(float(results["examples"])))
    return {"top1": float(results["top1"]), "top5": float(results["top5"]), "loss": float(results["loss"]),
            "examples": examples, "skipped": size - examples}
