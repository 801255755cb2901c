"""Generated dense-prediction data folders: coloured shapes on noise with their class-id masks (and
depth maps), in the layout `keras_vit.dense.data` reads."""

import os

import numpy as np
from PIL import Image

# class id: colour of its shape (0: the noise background)
COLOURS = {1: (230, 40, 40), 2: (40, 200, 40), 3: (40, 60, 230)}


def shape_sample(rng, size=64):
    """`(image uint8 (size, size, 3), mask uint8 (size, size))`: noise with one to three shapes,
    a square (class 1), a disc (class 2) and a triangle (class 3), each in its colour."""
    image = rng.integers(0, 256, (size, size, 3)).astype(np.float32) * 0.5 + 64
    mask = np.zeros((size, size), np.uint8)
    rows, cols = np.mgrid[:size, :size]
    for label in rng.choice([1, 2, 3], size=rng.integers(1, 4), replace=False):
        side = rng.integers(size // 5, size // 2)
        top, left = rng.integers(0, size - side, 2)
        r, c = rows - top, cols - left
        if label == 1:
            inside = (r >= 0) & (r < side) & (c >= 0) & (c < side)
        elif label == 2:
            inside = (r - side / 2) ** 2 + (c - side / 2) ** 2 < (side / 2) ** 2
        else:
            inside = (r >= 0) & (r < side) & (c >= 0) & (c <= r)
        mask[inside] = label
        image[inside] = np.asarray(COLOURS[label]) + rng.normal(0, 12, (int(inside.sum()), 3))
    return np.clip(np.round(image), 0, 255).astype(np.uint8), mask


def write_shapes(root, count=300, size=64, seed=0, depth=False, classes_file=True):
    """Writes `count` samples under `root` (`images/`, `masks/`, `classes.txt`; with `depth`
    also `depth/NAME.npy`, the depth 1 + class id); returns `root`."""
    rng = np.random.default_rng(seed)
    folders = ["images", "masks"] + (["depth"] if depth else [])
    for folder in folders:
        os.makedirs(os.path.join(root, folder), exist_ok=True)
    for i in range(count):
        image, mask = shape_sample(rng, size)
        Image.fromarray(image).save(os.path.join(root, "images", f"{i:04d}.png"))
        Image.fromarray(mask).save(os.path.join(root, "masks", f"{i:04d}.png"))
        if depth:
            np.save(os.path.join(root, "depth", f"{i:04d}.npy"), 1.0 + mask.astype(np.float32))
    if classes_file:
        with open(os.path.join(root, "classes.txt"), "w", encoding="utf-8") as handle:
            handle.write("background\nsquare\ndisc\ntriangle\n")
    return root
