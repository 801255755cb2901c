"""tensorflow-datasets builders that carry masks or depth, as dense-training sources.

`BUILDERS` declares, per builder, which feature is the image and which the target, the task, the
class names and how the stored values become class ids (a value not in `ids` is not labelled, the
ignore label 255). The builders whose features look dense but are not what training needs are in
`REFUSED` with the reason. The splits are chosen as for classification
(`keras_vit.data.sources.read_tfds`); the examples are decoded by tensorflow-datasets and
streamed, not read up front, so they are not checked as a folder's pairs are.
"""

import dataclasses
import os
from typing import Optional

import numpy as np
import tensorflow as tf

from keras_vit.data import augment
from keras_vit.data.sources import prepare_tfds, read_tfds, tfds_builder, VAL_FRACTION
from keras_vit.dense.data import DenseSource
from keras_vit.dense.labels import IGNORE

# Cityscapes' 19 evaluation classes: their `labelIds` (the gtFine PNGs tensorflow-datasets stores) -> train id
CITYSCAPES = {7: "road", 8: "sidewalk", 11: "building", 12: "wall", 13: "fence", 17: "pole", 19: "traffic light",
              20: "traffic sign", 21: "vegetation", 22: "terrain", 23: "sky", 24: "person", 25: "rider", 26: "car",
              27: "truck", 28: "bus", 31: "train", 32: "motorcycle", 33: "bicycle"}


@dataclasses.dataclass(frozen=True)
class DenseBuilder:
    """A tensorflow-datasets builder read as dense data."""

    image: str  # the Image feature of the photo
    target: str  # the mask (Image, one channel) or depth (Tensor) feature
    task: str  # "semantic" or "depth"
    class_names: Optional[tuple] = None  # semantic: the names of class ids 0, 1, ...
    ids: Optional[dict] = None  # semantic: stored value -> class id; other values are not labelled


BUILDERS = {
    # the trimap: 1 pet, 2 background, 3 the border between them (as TensorFlow's segmentation tutorial: value - 1)
    "oxford_iiit_pet": DenseBuilder("image", "segmentation_mask", "semantic", ("pet", "background", "border"),
                                    {1: 0, 2: 1, 3: 2}),
    # config semantic_segmentation(_extra); labelIds -> the 19 train ids, the rest not labelled (manual download)
    "cityscapes": DenseBuilder("image_left", "segmentation_label", "semantic", tuple(CITYSCAPES.values()),
                               {label: i for i, label in enumerate(CITYSCAPES)}),
    # depth in metres (float16), 0 where not measured
    "nyu_depth_v2": DenseBuilder("image", "depth", "depth"),
}
REFUSED = {
    "voc": "its objects are boxes (objects/bbox), it has no segmentation masks",
    "scene_parse150": "its annotation holds ADE20K's instance annotations (annotations_instance: an instance "
                      "category and an instance id per pixel), not the 150 semantic classes",
}


def accepted():
    """The builders `BUILDERS` reads, for messages."""
    return ", ".join(f"{name} ({spec.task})" for name, spec in BUILDERS.items())


def is_tfds_name(data):
    """Whether `data` (not an existing folder) is to be read as a tensorflow-datasets name: a name of
    `BUILDERS` / `REFUSED` (with a config), or a bare name (not a path)."""
    return data.split("/")[0] in {**BUILDERS, **REFUSED} or not ("/" in data or os.sep in data or data.startswith("."))


def builder_spec(name, task):
    """The `DenseBuilder` of `name` (`BUILDER[/CONFIG]`) for `task`; ValueError naming what is accepted."""
    base = name.split("/")[0]
    if base in REFUSED:
        raise ValueError(f"tensorflow-datasets {name!r} cannot train {task}: {REFUSED[base]}. Accepted: {accepted()}, "
                         "or a folder DIR/images + DIR/masks (DIR/depth).")
    spec = BUILDERS.get(base)
    if spec is None:
        raise ValueError(f"{name!r} is neither a data folder (DIR/images + DIR/masks or DIR/depth) nor a "
                         f"tensorflow-datasets builder with masks or depth: {accepted()}.")
    if spec.task != task:
        raise ValueError(f"tensorflow-datasets {name!r} holds {spec.task} targets, not {task}; accepted for {task}: "
                         f"{', '.join(n for n, s in BUILDERS.items() if s.task == task)}.")
    return spec


def lookup_table(ids):
    """The 256 class ids of the stored values 0-255 (`ids`; the rest the ignore label)."""
    table = np.full(256, IGNORE, np.uint8)
    for value, class_id in ids.items():
        table[value] = class_id
    return tf.constant(table)


def pair_of(spec):
    """The function from an example (dict of features) to `(uint8 (H, W, 3) image, (H, W) target)`."""
    table = lookup_table(spec.ids) if spec.task == "semantic" else None

    def pair(example):
        image, target = augment.to_rgb(example[spec.image]), example[spec.target]
        if target.shape.rank == 3:
            target = target[..., 0]
        if table is not None:
            target = tf.gather(table, tf.cast(target, tf.int32))
        else:
            target = tf.cast(target, tf.float32)
        tf.debugging.assert_equal(tf.shape(image)[:2], tf.shape(target), "a target has its image's size")
        return tf.ensure_shape(image, [None, None, 3]), tf.ensure_shape(target, [None, None])

    return pair


def load_tfds_source(name, task, *, val_fraction=None, seed=0, data_dir=None, manual_dir=None, download=True,
                     train_split=None, val_split=None):
    """The `DenseSource` of the tensorflow-datasets builder `name` for `task`: its splits as datasets of
    `(image, target)` pairs."""
    spec = builder_spec(name, task)
    builder = tfds_builder(name, data_dir or os.environ.get("TFDS_DATA_DIR"))
    features = builder.info.features
    if spec.target not in features or spec.image not in features:
        raise ValueError(f"tensorflow-datasets {name!r} has no {spec.target!r} feature (its features: "
                         f"{', '.join(features)}); choose a config with it, e.g. cityscapes/semantic_segmentation.")
    prepare_tfds(builder, name, manual_dir, download)
    (train, validation), sizes = read_tfds(builder, name, train_split, val_split,
                                           VAL_FRACTION if val_fraction is None else val_fraction, seed, pair_of(spec))
    names = list(spec.class_names) if spec.class_names else None
    return DenseSource(name, task, train, validation, names, sizes=sizes)
