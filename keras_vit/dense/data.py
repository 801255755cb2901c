"""Dense-prediction data folders: images paired with class-id masks or depth maps, checked up front.

    DIR/images/NAME.{jpg,png}  +  DIR/masks/NAME.png   (segmentation: class ids, 255 = not labelled;
                                                       optional DIR/classes.txt, one class name a line)
    DIR/images/NAME.{jpg,png}  +  DIR/depth/NAME.{png,npy}   (depth: a 16-bit PNG, its values divided by
                                                       `depth_scale`, or a float array; 0 = no measurement)

As the classification folders (`keras_vit.data.sources.from_folder`): `DIR/train/` and `DIR/val/` (or
`validation/`, `test/`) folders of that layout are the two splits, else `val_fraction` of the pairs
(at least one) is held out, a fixed draw with `seed`. Every pair is read once when the source is made,
and a bad one is refused in one line (ValueError): an image without its target, a target of
another size than its image, class ids >= the number of classes other than 255, depth with NaN,
infinite or negative values, a folder without `masks/` (`depth/`).
"""

import dataclasses
import os
from typing import Optional

import numpy as np
from PIL import Image

from keras_vit.data.sources import IMAGE_EXTENSIONS, VAL_FRACTION, VALIDATION_FOLDERS
from keras_vit.dense.labels import IGNORE
from keras_vit.utils.files import regular_file

TARGETS = {"semantic": ("masks", (".png",)), "depth": ("depth", (".png", ".npy"))}  # task: (folder, suffixes)
CLASSES_FILE = "classes.txt"


@dataclasses.dataclass
class DenseSource:
    """A training and a validation split: lists of `(image path, target path)` pairs (a folder), or
    `tf.data` datasets of `(uint8 image, target)` of `sizes` examples (`keras_vit.dense.tfds_data`)."""

    name: str
    task: str  # "semantic" or "depth"
    train: list
    validation: list
    class_names: Optional[list] = None  # semantic: one name per class id
    depth_scale: Optional[float] = None  # a 16-bit depth PNG holds depth x depth_scale (None: 1)
    sizes: Optional[tuple] = None  # (train, validation) where the splits are datasets, not pair lists

    @property
    def num_classes(self):
        return len(self.class_names) if self.class_names is not None else None

    @property
    def train_size(self):
        return self.sizes[0] if self.sizes else len(self.train)

    @property
    def validation_size(self):
        return self.sizes[1] if self.sizes else len(self.validation)


def read_target(path, depth_scale=None):
    """A target file as an array `(H, W)`: a mask's class ids (uint8; a palette PNG's indices), a
    depth map (float32: a 16-bit PNG's values divided by `depth_scale`, or an `.npy` array)."""
    path = os.fsdecode(path)
    if path.endswith(".npy"):
        array = np.load(regular_file(path, "as a depth map"), allow_pickle=False)
        if not np.issubdtype(array.dtype, np.number) or array.ndim != 2:
            raise ValueError(f"{path}: a depth map must be a 2-D array of numbers, got {array.dtype} {array.shape}.")
        return array.astype(np.float32)
    with Image.open(regular_file(path, "as a target")) as image:
        if image.mode not in ("L", "P", "I;16", "I;16B", "I"):
            raise ValueError(f"{path}: a {image.mode} PNG; a target must have one channel (class ids: 8-bit grey or "
                             "palette; depth: 16-bit grey).")
        array = np.asarray(image)
    if image.mode in ("L", "P"):
        return array.astype(np.uint8)
    return array.astype(np.float32) / np.float32(depth_scale or 1)


def image_size(path):
    """`(height, width)` of an image file, read from its header."""
    try:
        with Image.open(path) as image:
            return image.size[::-1]
    except OSError as error:
        raise ValueError(f"{os.fsdecode(path)}: not a readable image ({error}).") from None


def pairs(root, task):
    """`[(image path, target path)]` of the folder `root` (names sorted); ValueError for a missing
    target folder or target."""
    folder, suffixes = TARGETS[task]
    images, targets = os.path.join(root, "images"), os.path.join(root, folder)
    if not os.path.isdir(images):
        raise ValueError(f"{root} has no images/ folder (expected {root}/images/NAME.jpg and "
                         f"{root}/{folder}/NAME{'|'.join(suffixes)}).")
    if not os.path.isdir(targets):
        raise ValueError(f"{root} has images/ but no {folder}/ folder: task {task!r} pairs each images/NAME.jpg "
                         f"with {folder}/NAME{'|'.join(suffixes)}.")
    found = []
    for file in sorted(os.listdir(images)):
        stem, suffix = os.path.splitext(file)
        if suffix.lower() not in IMAGE_EXTENSIONS:
            continue
        target = next((os.path.join(targets, stem + s) for s in suffixes if os.path.lexists(os.path.join(targets, stem + s))), None)
        if target is None:
            raise ValueError(f"{os.path.join(images, file)} has no {folder}/{stem}{'|'.join(suffixes)}.")
        found.append((regular_file(os.path.join(images, file), "as an image"), regular_file(target, "as a target")))
    if not found:
        raise ValueError(f"{images} holds no images with extensions {IMAGE_EXTENSIONS}.")
    return found


def check_pair(image, target, task, num_classes):
    """The largest class id of a valid mask (0 for depth); ValueError for a bad pair."""
    array = read_target(target)
    if array.shape != tuple(image_size(image)):
        raise ValueError(f"{target} is {array.shape[0]}x{array.shape[1]}, its image {image} "
                         f"{'x'.join(map(str, image_size(image)))}; a target has its image's size.")
    if task == "depth":
        if not np.all(np.isfinite(array)) or array.min() < 0:
            raise ValueError(f"{target} holds NaN, infinite or negative depth; depth must be >= 0 (0: no measurement).")
        return 0
    labelled = array[array != IGNORE]
    largest = int(labelled.max(initial=0))
    if num_classes is not None and largest >= num_classes:
        raise ValueError(f"{target} holds class id {largest}; ids must be below {num_classes} "
                         f"(the classes of {CLASSES_FILE}) or {IGNORE} (not labelled).")
    return largest


def class_names(root, largest):
    """The names of `root/classes.txt` (one a line), else `"0" ... "largest"`."""
    path = os.path.join(root, CLASSES_FILE)
    if not os.path.lexists(path):
        return [str(i) for i in range(largest + 1)]
    with open(regular_file(path, "as the class names"), encoding="utf-8") as handle:
        names = [line.strip() for line in handle if line.strip()]
    if not names or len(names) >= IGNORE:
        raise ValueError(f"{path} names {len(names)} classes; expected 1 to {IGNORE - 1}, one a line.")
    return names


def held_out(count, fraction, seed):
    """Indices `(train, held_out)` of `count` pairs with `fraction` of them (at least one) held out."""
    if not 0 < fraction < 1:
        raise ValueError(f"val_fraction={fraction} must be between 0 and 1.")
    if count < 2:
        raise ValueError(f"{count} image(s): at least two are needed to hold one out for validation.")
    held = np.random.default_rng(seed).permutation(count)[: max(1, int(round(fraction * count)))]
    return np.setdiff1d(np.arange(count), held), np.sort(held)


def check_depth_scale(depth_scale):
    """`depth_scale` if None or a finite number > 0, else ValueError."""
    if depth_scale is not None and (isinstance(depth_scale, bool) or not isinstance(depth_scale, (int, float))
                                    or not 0 < depth_scale < float("inf")):
        raise ValueError(f"depth_scale={depth_scale!r} must be a number > 0 (a 16-bit depth PNG holds depth x "
                         "depth_scale: KITTI 256, NYU's millimetres 1000).")
    return depth_scale


def load_dense_source(root, task, *, val_fraction=None, seed=0, depth_scale=None):
    """The `DenseSource` of the folder `root` for `task` ("semantic" or "depth"), every pair checked;
    a 16-bit depth PNG's values divided by `depth_scale`."""
    if task not in TARGETS:
        raise ValueError(f"Unknown task {task!r}; expected one of {tuple(TARGETS)}.")
    check_depth_scale(depth_scale)
    root = os.fspath(root)
    if not os.path.isdir(root):
        raise ValueError(f"No such data folder: {root} (expected {root}/images/ and {root}/{TARGETS[task][0]}/).")
    val_root = next((os.path.join(root, n) for n in VALIDATION_FOLDERS if os.path.isdir(os.path.join(root, n))), None)
    if os.path.isdir(os.path.join(root, "train")) and val_root:
        train, validation = pairs(os.path.join(root, "train"), task), pairs(val_root, task)
    else:
        found = pairs(root, task)
        kept, held = held_out(len(found), VAL_FRACTION if val_fraction is None else val_fraction, seed)
        train, validation = [found[i] for i in kept], [found[i] for i in held]
    names = None
    if task == "semantic":
        given = os.path.lexists(os.path.join(root, CLASSES_FILE))
        limit = len(class_names(root, 0)) if given else None
        largest = max(check_pair(*pair, task, limit) for pair in train + validation)
        names = class_names(root, largest)
    else:
        for pair in train + validation:
            check_pair(*pair, task, None)
    return DenseSource(root, task, train, validation, names, depth_scale)
