"""Image-classification data sources as `tf.data` datasets of `(uint8 image, int label)`.

Four kinds of source, chosen by `load_source(data, ...)`:

- `"digits"`: scikit-learn's handwritten digits (8x8 grey, shipped inside scikit-learn),
  scaled to 0-255 RGB; the default that needs no download.
- a tensorflow-datasets name (`"cifar10"`, `"imagenet2012"`, `"oxford_iiit_pet"`, ...),
  optionally with a config (`"imagenette/320px-v2"`), read from `data_dir` (default
  `TFDS_DATA_DIR` or `~/tensorflow_datasets`) and downloaded / prepared there if needed,
  reading manual downloads from `manual_dir`.
- a folder with one sub-folder of images per class (or `train/` and `val/` folders of those).
- NumPy arrays `(x, y)` or `((x_train, y_train), (x_val, y_val))`, or an `.npz` file with
  `x_train, y_train` and optionally `x_val, y_val` (or `x_test, y_test`). The dtype says
  what the images hold: integer arrays are 0-255 pixel values, float arrays intensities in
  [0, 1] (scaled by 255 and rounded to uint8); anything else is refused.

Images of the folder source are decoded in the pipeline (`Source.decode`), the others are
already pixels.
"""

import dataclasses
import difflib
import os
import warnings
from typing import Callable, Optional

import numpy as np
import tensorflow as tf

from keras_vit.utils.files import regular_file

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".gif")
VAL_FRACTION = 0.1  # held out by default where there is no validation split (digits: 0.2)
DIGITS_VAL_FRACTION = 0.2
VALIDATION_FOLDERS = ("val", "validation", "test")
# Signature -> end marker found in the last _TAIL bytes of a complete file (BMP: a size field).
_MAGIC = {b"\xff\xd8\xff": b"\xff\xd9", b"\x89PNG\r\n\x1a\n": b"IEND", b"GIF87a": b";", b"GIF89a": b";", b"BM": None}
_TAIL = 1024


class DatasetUnavailableError(OSError):
    """A known dataset that is not on this machine and could not be downloaded / prepared."""


@dataclasses.dataclass
class Source:
    """A train and a validation split of `(image, label)` examples and their classes."""

    name: str
    train: tf.data.Dataset
    validation: Optional[tf.data.Dataset]
    train_size: int
    validation_size: int
    class_names: list
    decode: Optional[Callable] = None  # maps an element to `(uint8 HxWx3 image, label)`
    # maps an element to `(encoded image bytes, label)`: training then decodes only the crop
    read: Optional[Callable] = None

    @property
    def num_classes(self):
        return len(self.class_names)


def load_source(
    data="digits",
    *,
    data_dir=None,
    manual_dir=None,
    download=True,
    train_split=None,
    val_split=None,
    val_fraction=None,
    on_corrupt="skip",
    seed=0,
):
    """Returns the `Source` for `data` (see the module docstring for what `data` may be).

    `train_split` / `val_split` pick tensorflow-datasets splits (with slicing, e.g.
    `"train[:90%]"`); by default the train split and "validation" (else "test"). Sources
    without a validation split hold out `val_fraction` of the training examples (a fixed,
    class-stratified draw with `seed`; None: 0.2 for digits, else 0.1). `on_corrupt`
    ("skip" or "error") is what an image folder does with a file that is not a readable image.
    """
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed={seed!r} must be a whole number >= 0.")
    for name, value in (("data_dir", data_dir), ("manual_dir", manual_dir), ("train_split", train_split),
                        ("val_split", val_split)):
        if value is not None and not isinstance(value, (str, os.PathLike)):
            raise ValueError(f"{name}={value!r} must be a path or split name (text), or None.")
    if val_fraction is None:
        val_fraction = DIGITS_VAL_FRACTION if isinstance(data, str) and data == "digits" else VAL_FRACTION
    if isinstance(data, (tuple, list)):
        return from_arrays(data, val_fraction=val_fraction, seed=seed)
    if not isinstance(data, (str, os.PathLike)):
        raise ValueError(
            f"data={type(data).__name__} is not supported; expected 'digits', a "
            "tensorflow-datasets name, an image folder, an .npz file or (x, y) arrays."
        )
    data = os.fspath(data)
    if data == "digits":
        return digits(val_fraction=val_fraction, seed=seed)
    if data.endswith(".npz"):
        if not os.path.lexists(data):
            raise FileNotFoundError(f"No such .npz file: {data}")
        regular_file(data, "as a data set")
        return from_npz(data, val_fraction=val_fraction, seed=seed)
    if os.path.isdir(data):
        return from_folder(data, val_fraction=val_fraction, on_corrupt=on_corrupt, seed=seed)
    if os.sep in data and not os.path.exists(data) and not is_builder_config(data):
        raise FileNotFoundError(f"No such image folder: {data}")
    return from_tfds(
        data,
        data_dir=data_dir,
        manual_dir=manual_dir,
        download=download,
        train_split=train_split,
        val_split=val_split,
        val_fraction=val_fraction,
        seed=seed,
    )


# --------------------------------------------------------------------------- arrays


def _as_rgb_uint8(images, what):
    images = np.asarray(images)
    if images.ndim == 3:
        images = images[..., None]
    if images.ndim != 4 or images.shape[-1] not in (1, 3):
        raise ValueError(
            f"{what} has shape {images.shape}; expected (N, H, W), (N, H, W, 1) or (N, H, W, 3)."
        )
    low, high = (images.min(), images.max()) if images.size else (0, 0)
    if np.issubdtype(images.dtype, np.integer):
        if low < 0 or high > 255:
            raise ValueError(f"{what} has values in [{low}, {high}]; integer images must be 0-255 pixel values.")
        images = images.astype(np.uint8)
    elif np.issubdtype(images.dtype, np.floating):
        if not (0 <= low and high <= 1):  # also refuses NaN
            raise ValueError(
                f"{what} is a {images.dtype} array with values in [{low}, {high}]; float images must be "
                "intensities in [0, 1] (0-255 pixel values: give an integer array, e.g. x.astype('uint8'))."
            )
        images = np.round(images * 255.0).astype(np.uint8)
    else:
        raise ValueError(
            f"{what} has dtype {images.dtype}; expected integer pixel values 0-255 or float intensities in [0, 1]."
        )
    if images.shape[-1] == 1:
        images = np.repeat(images, 3, axis=-1)
    return images


def _as_labels(labels, count, what):
    labels = np.asarray(labels).reshape(-1)
    if labels.shape[0] != count:
        raise ValueError(f"{what} has {labels.shape[0]} labels for {count} images.")
    if not np.issubdtype(labels.dtype, np.integer) or (labels.size and labels.min() < 0):
        raise ValueError(f"{what} must hold integer class indices >= 0, got dtype {labels.dtype}.")
    return labels.astype(np.int64)


def stratified_split(labels, fraction, seed):
    """Indices `(train, held_out)` with `fraction` of each class held out (at least one)."""
    if not 0 < fraction < 1:
        raise ValueError(f"val_fraction={fraction} must be between 0 and 1.")
    rng = np.random.default_rng(seed)
    held = []
    for label in np.unique(labels):
        members = rng.permutation(np.flatnonzero(labels == label))
        if len(members) > 1:
            held.extend(members[: max(1, int(round(fraction * len(members))))])
    held = np.sort(np.asarray(held, dtype=np.int64))
    return np.setdiff1d(np.arange(len(labels)), held), held


def _array_source(name, train, validation, class_names=None):
    (x_train, y_train), (x_val, y_val) = train, validation
    classes = int(max(y_train.max(initial=0), y_val.max(initial=0))) + 1
    return Source(
        name=name,
        train=tf.data.Dataset.from_tensor_slices((x_train, y_train)),
        validation=tf.data.Dataset.from_tensor_slices((x_val, y_val)),
        train_size=len(y_train),
        validation_size=len(y_val),
        class_names=list(class_names or [str(i) for i in range(classes)]),
    )


def from_arrays(data, *, val_fraction=VAL_FRACTION, seed=0, name="arrays", class_names=None):
    """A `Source` from `(x, y)` (a validation part is held out) or `((x, y), (x_val, y_val))`."""
    if len(data) == 2 and all(isinstance(part, (tuple, list)) and len(part) == 2 for part in data):
        (x, y), (x_val, y_val) = data
        x, x_val = _as_rgb_uint8(x, "x_train"), _as_rgb_uint8(x_val, "x_val")
        y, y_val = _as_labels(y, len(x), "y_train"), _as_labels(y_val, len(x_val), "y_val")
    elif len(data) == 2:
        x = _as_rgb_uint8(data[0], "x")
        y = _as_labels(data[1], len(x), "y")
        train, held = stratified_split(y, val_fraction, seed)
        x, x_val, y, y_val = x[train], x[held], y[train], y[held]
    else:
        raise ValueError("Arrays must be given as (x, y) or ((x_train, y_train), (x_val, y_val)).")
    return _array_source(name, (x, y), (x_val, y_val), class_names)


def from_npz(path, *, val_fraction=VAL_FRACTION, seed=0):
    """A `Source` from an `.npz` with `x_train, y_train` [+ `x_val, y_val` or `x_test, y_test`]."""
    with np.load(path) as archive:
        keys = set(archive.files)
        if not {"x_train", "y_train"} <= keys:
            raise ValueError(f"{path} must contain x_train and y_train arrays, has {sorted(keys)}.")
        train = (archive["x_train"], archive["y_train"])
        for prefix in ("val", "test"):
            if {f"x_{prefix}", f"y_{prefix}"} <= keys:
                data = (train, (archive[f"x_{prefix}"], archive[f"y_{prefix}"]))
                break
        else:
            data = train
        names = [str(n) for n in archive["class_names"]] if "class_names" in keys else None
    return from_arrays(data, val_fraction=val_fraction, seed=seed, name=path, class_names=names)


def digits(val_fraction=DIGITS_VAL_FRACTION, seed=0):
    """scikit-learn's 1797 handwritten digits (8x8, 0-16) as 0-255 RGB, `val_fraction` held out
    (stratified)."""
    from sklearn.datasets import load_digits

    bunch = load_digits()
    images = np.round(bunch.images * (255.0 / 16.0)).astype(np.uint8)
    labels = bunch.target.astype(np.int64)
    train, held = stratified_split(labels, val_fraction, seed)
    images = np.repeat(images[..., None], 3, axis=-1)
    return _array_source(
        "digits",
        (images[train], labels[train]),
        (images[held], labels[held]),
        [str(i) for i in range(10)],
    )


# --------------------------------------------------------------------------- image folder


def _readable_image(path):
    """Whether `path` starts with an image signature and is complete (its end marker, or for
    BMP its recorded size, is there): truncated files are caught here, not mid-training."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(16)
            size = handle.seek(0, os.SEEK_END)
            handle.seek(max(size - _TAIL, 0))
            tail = handle.read()
    except OSError:
        return False
    magic = next((m for m in _MAGIC if head.startswith(m)), None)
    if magic == b"BM":
        return len(head) >= 6 and int.from_bytes(head[2:6], "little") <= size
    return magic is not None and _MAGIC[magic] in tail


def scan_folder(root, on_corrupt):
    """`(class names, file paths as bytes, labels)` of the image folder `root/CLASS/IMAGE` (classes
    sorted); unreadable files are skipped with a warning or, with `on_corrupt="error"`, refused."""
    classes = sorted(e.name for e in os.scandir(root) if e.is_dir() and not e.name.startswith("."))
    if not classes:
        raise ValueError(f"Image folder {root} has no class sub-folders (expected root/CLASS/IMAGE).")
    paths, labels, corrupt = [], [], []
    for label, name in enumerate(classes):
        for folder, _, files in sorted(os.walk(os.path.join(root, name))):
            for file in sorted(files):
                if not file.lower().endswith(IMAGE_EXTENSIONS):
                    continue
                path = regular_file(os.path.join(folder, file), "as an image")  # a FIFO would block
                if _readable_image(path):
                    paths.append(path)
                    labels.append(label)
                else:
                    corrupt.append(path)
    if corrupt:
        listed = ", ".join(corrupt[:5]) + (f" and {len(corrupt) - 5} more" if len(corrupt) > 5 else "")
        if on_corrupt == "error":
            raise ValueError(f"{len(corrupt)} file(s) in {root} are not readable images: {listed}.")
        warnings.warn(f"Skipping {len(corrupt)} unreadable image file(s) in {root}: {listed}.", stacklevel=3)
    if not paths:
        raise ValueError(f"Image folder {root} has no images with extensions {IMAGE_EXTENSIONS}.")
    # As bytes: a file name that is not UTF-8 (undecodable bytes) is read as the file system names it.
    return classes, np.asarray([os.fsencode(path) for path in paths]), np.asarray(labels, dtype=np.int64)


def decode_image_file(path, label):
    """Reads and decodes a JPEG / PNG / GIF / BMP file to a uint8 RGB image (the same pixels as
    `keras_vit.data.images.read_image`, which needs no TensorFlow)."""
    image = tf.io.decode_image(tf.io.read_file(path), channels=3, expand_animations=False)
    return tf.ensure_shape(image, [None, None, 3]), label


def read_image_file(path, label):
    """The encoded bytes of an image file (decoded by the training pipeline)."""
    return tf.io.read_file(path), label


def from_folder(root, *, val_fraction=VAL_FRACTION, on_corrupt="skip", seed=0):
    """A `Source` from `root/CLASS/*.jpg` (validation held out) or `root/{train,val}/CLASS/*`.

    Files that do not start with a JPEG, PNG, GIF or BMP signature, or are truncated (no end
    marker), are skipped with a warning naming them (`on_corrupt="skip"`), or raise a
    ValueError (`"error"`). A complete file damaged inside, which only the decoder sees, is
    dropped by the pipeline with "skip", and stops it with a `tf.errors.InvalidArgumentError`
    with "error".
    """
    if on_corrupt not in ("skip", "error"):
        raise ValueError(f"on_corrupt={on_corrupt!r} must be 'skip' or 'error'.")
    val_root = next((os.path.join(root, n) for n in VALIDATION_FOLDERS if os.path.isdir(os.path.join(root, n))), None)
    if os.path.isdir(os.path.join(root, "train")) and val_root:
        classes, paths, labels = scan_folder(os.path.join(root, "train"), on_corrupt)
        val_classes, val_paths, val_labels = scan_folder(val_root, on_corrupt)
        if val_classes != classes:
            raise ValueError(f"{val_root} has classes {val_classes}, the train folder {classes}.")
    else:
        classes, paths, labels = scan_folder(root, on_corrupt)
        train, held = stratified_split(labels, val_fraction, seed)
        paths, val_paths, labels, val_labels = paths[train], paths[held], labels[train], labels[held]
    return Source(
        name=os.fspath(root),
        train=tf.data.Dataset.from_tensor_slices((paths, labels)),
        validation=tf.data.Dataset.from_tensor_slices((val_paths, val_labels)),
        train_size=len(paths),
        validation_size=len(val_paths),
        class_names=classes,
        decode=decode_image_file,
        read=read_image_file,
    )


# --------------------------------------------------------------------------- tensorflow-datasets


def is_builder_config(data):
    """Whether `data` (no file or folder) names a tensorflow-datasets builder's config, `BUILDER/CONFIG`."""
    import tensorflow_datasets as tfds

    return "/" in data and data.split("/")[0] in tfds.list_builders(with_community_datasets=False)


def tfds_builder(name, data_dir):
    """The tensorflow-datasets builder `name` (`NAME[/CONFIG]`); ValueError naming close names."""
    import tensorflow_datasets as tfds

    try:
        return tfds.builder(name, data_dir=data_dir)
    except (tfds.core.DatasetNotFoundError, ValueError, AssertionError) as error:  # unknown; unparsable; bad version
        known = tfds.list_builders(with_community_datasets=False)  # the community's list is fetched: offline, slow
        close = difflib.get_close_matches(name.split("/")[0], known, n=3)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        reason = "" if isinstance(error, tfds.core.DatasetNotFoundError) else f" ({first_line(error)})"
        raise ValueError(
            f"Unknown dataset {name!r}{reason}: not 'digits', an existing image folder or .npz file, nor "
            f"a tensorflow-datasets name.{hint} Valid names: `python -c \"import "
            "tensorflow_datasets as tfds; print(tfds.list_builders())\"` or "
            "https://www.tensorflow.org/datasets/catalog/overview."
        ) from None


def first_line(error):
    """The first line of an error's message (tensorflow-datasets' run over several)."""
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


def read_tfds_split(builder, name, split, splits, shuffle, seed):
    """The `tf.data` dataset of `split` of a prepared `builder` (`splits`: its known split names,
    empty where its metadata does not say, e.g. mocked); a split name tensorflow-datasets cannot
    parse, or one that selects no examples, is a one-line ValueError naming the known splits."""
    import tensorflow_datasets as tfds

    where = f"Split {split!r} of {name!r}"
    known = f"known splits: {sorted(splits)}; slices as 'train[:80%]', 'train[10:20]'"
    try:
        empty = bool(splits) and builder.info.splits[split].num_examples <= 0
        if not empty:
            config = tfds.ReadConfig(shuffle_seed=seed, shuffle_reshuffle_each_iteration=True)
            return builder.as_dataset(split=split, shuffle_files=shuffle, read_config=config)
    except (ValueError, KeyError) as error:
        raise ValueError(f"{where}: {first_line(error)} ({known}).") from None
    raise ValueError(f"{where} holds no examples ({known}).")


def _features(builder):
    import tensorflow_datasets as tfds

    features = builder.info.features
    image_key = next((k for k, f in features.items() if isinstance(f, tfds.features.Image)), None)
    label_key = next((k for k, f in features.items() if isinstance(f, tfds.features.ClassLabel)), None)
    if image_key is None or label_key is None:
        raise ValueError(
            f"Dataset {builder.name!r} is not an image-classification dataset: it needs an Image "
            f"and a ClassLabel feature, has {dict(features.items())}."
        )
    return image_key, label_key


def prepare_tfds(builder, name, manual_dir, download):
    """Downloads and prepares `builder` unless it is; `DatasetUnavailableError` where it cannot."""
    import tensorflow_datasets as tfds

    if builder.is_prepared():
        return
    where = builder.data_dir_root
    if not download:
        raise DatasetUnavailableError(
            f"Dataset {name!r} is not prepared in {where} and download=False. Prepare it with "
            f"`tfds build {name} --data_dir {where}` (where there is network), or point data_dir / "
            "TFDS_DATA_DIR at a folder that holds it."
        )
    config = tfds.download.DownloadConfig(manual_dir=manual_dir)
    try:
        builder.download_and_prepare(download_config=config)
    except Exception as error:  # network, missing manual files, disk: all say the same to users
        raise DatasetUnavailableError(
            f"Could not download and prepare dataset {name!r} into {where}: "
            f"{type(error).__name__}: {error}. If this machine is offline, run `tfds build {name} "
            f"--data_dir DIR` where there is network and copy DIR here (then pass data_dir=DIR or "
            "set TFDS_DATA_DIR). Datasets with manual downloads (e.g. imagenet2012) need their "
            f"archives in manual_dir (now {manual_dir or 'DIR/downloads/manual'})."
        ) from error


def tfds_splits(splits, train_split, val_split, val_fraction):
    """`(train split, validation split)`: the given ones, by default "train" and "validation" (else
    "test"; else `val_fraction` of the train split held out, its first part)."""
    train_split = train_split or "train"
    if val_split is None:
        val_split = next((s for s in ("validation", "test") if s in splits), None)
        if val_split is None and not splits:  # metadata unknown (e.g. mocked): assume "test"
            val_split = "test"
    if val_split is None:
        percent = int(round(100 * val_fraction))
        train_split, val_split = f"{train_split}[{percent}%:]", f"{train_split}[:{percent}%]"
    return train_split, val_split


def tfds_size(dataset):
    """The number of examples of a `tf.data` dataset (counted where its cardinality is unknown)."""
    size = int(dataset.cardinality())
    return size if size >= 0 else int(dataset.reduce(np.int64(0), lambda n, _: n + 1))


def read_tfds(builder, name, train_split, val_split, val_fraction, seed, to_pair):
    """`(train, validation), (train size, validation size)`: the prepared `builder`'s two splits
    (`tfds_splits`) as datasets of `to_pair(example)`, the train split's files shuffled by `seed`."""
    splits = set(builder.info.splits.keys())
    chosen = tfds_splits(splits, train_split, val_split, val_fraction)
    datasets = [read_tfds_split(builder, name, split, splits, shuffle, seed)
                .map(to_pair, num_parallel_calls=tf.data.AUTOTUNE) for split, shuffle in zip(chosen, (True, False))]
    return tuple(datasets), tuple(tfds_size(dataset) for dataset in datasets)


def from_tfds(
    name,
    *,
    data_dir=None,
    manual_dir=None,
    download=True,
    train_split=None,
    val_split=None,
    val_fraction=VAL_FRACTION,
    seed=0,
):
    """A `Source` from a tensorflow-datasets image-classification dataset."""
    builder = tfds_builder(name, data_dir or os.environ.get("TFDS_DATA_DIR"))
    image_key, label_key = _features(builder)
    prepare_tfds(builder, name, manual_dir, download)
    (train, validation), sizes = read_tfds(builder, name, train_split, val_split, val_fraction, seed,
                                           lambda ex: (ex[image_key], ex[label_key]))
    return Source(
        name=name,
        train=train,
        validation=validation,
        train_size=sizes[0],
        validation_size=sizes[1],
        class_names=list(builder.info.features[label_key].names),
    )
