"""Where dense-training data comes from: a folder (`keras_vit.dense.data`) or a tensorflow-datasets
builder with masks or depth (`keras_vit.dense.tfds_data`), chosen by `load_source`."""

import os

from keras_vit.dense.data import TARGETS, check_depth_scale, load_dense_source

# the `TrainConfig` fields (`config.json` keys) that say how a run's data is read
OPTIONS = ("val_fraction", "seed", "depth_scale", "data_dir", "manual_dir", "download", "train_split", "val_split")


def source_options(config):
    """The keyword arguments of `load_source` that a run's config (a dict, as in `config.json`) sets."""
    return {name: config[name] for name in OPTIONS if config.get(name) is not None}


def load_source(data, task, *, val_fraction=None, seed=0, depth_scale=None, **tfds_options):
    """The `DenseSource` of `data` for `task` ("semantic" or "depth"): a folder (every pair checked,
    16-bit depth PNGs divided by `depth_scale`), else a tensorflow-datasets name of
    `keras_vit.dense.tfds_data.BUILDERS` (`tfds_options`: `data_dir`, `manual_dir`, `download`,
    `train_split`, `val_split`)."""
    root = os.fspath(data)
    if os.path.isdir(root) or task not in TARGETS:
        return load_dense_source(root, task, val_fraction=val_fraction, seed=seed, depth_scale=depth_scale)
    from keras_vit.dense.tfds_data import is_tfds_name, load_tfds_source  # TensorFlow: for these only

    if not is_tfds_name(root):
        return load_dense_source(root, task)  # its "no such folder"
    check_depth_scale(depth_scale)
    return load_tfds_source(root, task, val_fraction=val_fraction, seed=seed, **tfds_options)
