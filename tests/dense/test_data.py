"""Dense data folders (`keras_vit.dense.data`): pairs, splits, and each bad input refused in one line."""

import os

import numpy as np
import pytest
from PIL import Image

from keras_vit.dense.data import load_dense_source, read_target
from keras_vit.dense.labels import IGNORE
from tests.support.dense_data import write_shapes

pytestmark = pytest.mark.backend_independent  # files and NumPy: runs under one backend (tests/conftest.py)


@pytest.fixture
def folder(tmp_path):
    return write_shapes(str(tmp_path / "shapes"), count=10, size=16, depth=True)


def test_pairs_classes_and_held_out_split(folder):
    source = load_dense_source(folder, "semantic", val_fraction=0.2, seed=3)
    assert (source.train_size, source.validation_size) == (8, 2)
    assert source.class_names == ["background", "square", "disc", "triangle"]
    names = sorted(os.path.basename(image) for image, _ in source.train + source.validation)
    assert names == [f"{i:04d}.png" for i in range(10)]
    assert all(os.path.basename(i) == os.path.basename(m) and "masks" in m for i, m in source.train)
    assert load_dense_source(folder, "semantic", val_fraction=0.2, seed=3).validation == source.validation
    depth = load_dense_source(folder, "depth")
    assert depth.num_classes is None and depth.train[0][1].endswith(".npy")


def test_train_and_val_folders_are_the_splits(tmp_path):
    write_shapes(str(tmp_path / "train"), count=4, size=16, classes_file=False)
    write_shapes(str(tmp_path / "val"), count=2, size=16, seed=1, classes_file=False)
    source = load_dense_source(str(tmp_path), "semantic")
    assert (source.train_size, source.validation_size) == (4, 2)
    assert source.num_classes >= 2 and source.class_names[0] == "0"  # inferred: ids 0 .. largest


def test_targets_read_as_written(tmp_path):
    palette = Image.fromarray(np.array([[0, 3], [255, 1]], np.uint8), mode="P")
    palette.putpalette([0, 0, 0, 255, 0, 0] * 128)
    palette.save(tmp_path / "p.png")
    np.testing.assert_array_equal(read_target(str(tmp_path / "p.png")), [[0, 3], [255, 1]])
    Image.fromarray(np.array([[0, 65535]], np.uint16)).save(tmp_path / "d.png")
    depth = read_target(str(tmp_path / "d.png"))
    assert depth.dtype == np.float32 and depth.tolist() == [[0.0, 65535.0]]


def _mutate(folder, what):
    mask_path = os.path.join(folder, "masks", "0003.png")
    if what == "size":
        Image.fromarray(np.zeros((8, 16), np.uint8)).save(mask_path)
    elif what == "class":
        mask = np.zeros((16, 16), np.uint8)
        mask[0, 0], mask[1, 1] = 7, IGNORE
        Image.fromarray(mask).save(mask_path)
    elif what == "missing":
        os.remove(mask_path)
    elif what == "rgb":
        Image.fromarray(np.zeros((16, 16, 3), np.uint8)).save(mask_path)
    elif what in ("nan", "negative"):
        depth = np.ones((16, 16), np.float32)
        depth[2, 2] = np.nan if what == "nan" else -1.0
        np.save(os.path.join(folder, "depth", "0003.npy"), depth)
    elif what == "no_masks":
        for name in os.listdir(os.path.join(folder, "masks")):
            os.remove(os.path.join(folder, "masks", name))
        os.rmdir(os.path.join(folder, "masks"))


@pytest.mark.parametrize("what, task, message", [
    ("size", "semantic", r"0003.png is 8x16, its image .* 16x16"),
    ("class", "semantic", r"class id 7; ids must be below 4 .* or 255"),
    ("missing", "semantic", r"0003.png has no masks/0003.png"),
    ("rgb", "semantic", r"RGB PNG; a target must have one channel"),
    ("nan", "depth", r"NaN, infinite or negative depth"),
    ("negative", "depth", r"NaN, infinite or negative depth"),
    ("no_masks", "semantic", r"has images/ but no masks/ folder"),
])
def test_bad_folders_refused_in_one_line(folder, what, task, message):
    _mutate(folder, what)
    with pytest.raises(ValueError, match=message) as error:
        load_dense_source(folder, task)
    assert "\n" not in str(error.value)
