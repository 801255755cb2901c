"""Paired augmentation of dense training (`keras_vit.dense.pipeline`): image and target cropped,
resized and flipped alike, checked on images whose colours encode where each pixel came from."""

import os

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from keras_vit.data.pipeline import Augmentation
from keras_vit.dense import pipeline
from keras_vit.dense.data import load_dense_source
from keras_vit.dense.labels import IGNORE

pytestmark = pytest.mark.backend_independent  # tf.data code: runs under one backend (tests/conftest.py)

BLOCK, BLOCKS = 8, 8  # 64 x 64 images of 8 x 8 blocks, each its own colour and class id


def coded_pair(offset=0):
    """`(image, mask)`: block (r, c) coloured (16r + 8, 16c + 8, 100 + offset) with id 8r + c."""
    rows, cols = np.mgrid[: BLOCK * BLOCKS, : BLOCK * BLOCKS] // BLOCK
    image = np.stack([16 * rows + 8, 16 * cols + 8, np.full_like(rows, 100 + offset)], -1).astype(np.uint8)
    return image, (BLOCKS * rows + cols).astype(np.uint8)


def ids_of_colours(image):
    """The block id each pixel's colour encodes where it equals a block's colour exactly, else -1."""
    r, g = (image[..., 0] - 8) / 16, (image[..., 1] - 8) / 16
    exact = (np.abs(r - np.round(r)) < 0.02) & (np.abs(g - np.round(g)) < 0.02)
    return np.where(exact, BLOCKS * np.round(r) + np.round(g), -1).astype(int)


def check_paired(image, target):
    """Asserts the target is the coded id wherever the image is a block's colour (a third of the
    pixels at least); returns the mismatches of the target flipped, which must not be 0."""
    ids = ids_of_colours(image)
    known = ids >= 0
    assert known.mean() > 0.3
    np.testing.assert_array_equal(np.asarray(target)[known], ids[known])
    return int(np.sum(np.asarray(target)[:, ::-1][known] != ids[known]))


def test_crop_resize_and_flip_keep_image_and_mask_paired():
    image, mask = coded_pair()
    flipped, unflipped = 0, 0
    for seed in range(12):
        out, target = pipeline.paired_crop(tf.constant(image), tf.constant(mask), tf.constant([seed, 7], tf.int64),
                                           32, (0.3, 1.0), (0.75, 4 / 3), True)
        assert out.shape == (32, 32, 3) and target.shape == (32, 32) and target.dtype == tf.uint8
        assert check_paired(out.numpy(), target.numpy()) > 0  # a target flipped alone would fail
        ids = ids_of_colours(out.numpy())
        columns = np.nonzero(ids >= 0)[1]
        is_flipped = np.corrcoef(columns, ids[ids >= 0] % BLOCKS)[0, 1] < 0  # colours run right to left
        flipped, unflipped = flipped + is_flipped, unflipped + (not is_flipped)
    assert flipped and unflipped  # both draws seen


def test_depth_is_resized_by_nearest_neighbour():
    image, mask = coded_pair()
    depth = mask.astype(np.float32) * 0.5 + 1.0
    out, target = pipeline.paired_crop(tf.constant(image), tf.constant(depth), tf.constant([1, 2], tf.int64),
                                       48, (0.2, 0.5), (0.75, 4 / 3), True)
    assert set(np.unique(target.numpy())) <= set(np.unique(depth))  # no value invented between two
    ids = ids_of_colours(out.numpy())
    np.testing.assert_array_equal(target.numpy()[ids >= 0], ids[ids >= 0] * 0.5 + 1.0)


@pytest.fixture(scope="module")
def coded_folder(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("coded"))
    for folder in ("images", "masks", "depth"):
        os.makedirs(os.path.join(root, folder))
    for i in range(6):
        image, mask = coded_pair(offset=i)
        mask[:2] = IGNORE
        Image.fromarray(image).save(os.path.join(root, "images", f"{i}.png"))
        Image.fromarray(mask).save(os.path.join(root, "masks", f"{i}.png"))
        np.save(os.path.join(root, "depth", f"{i}.npy"), mask.astype(np.float32))
    return root


def _unit_to_pixels(images):
    return np.asarray(images) * 127.5 + 127.5


def test_training_stream_pairs_files_resumes_and_scales(coded_folder):
    source = load_dense_source(coded_folder, "semantic", val_fraction=0.3)
    aug = Augmentation(32, crop_area=(0.3, 1.0))
    batches = [b for _, b in zip(range(3), pipeline.train_dataset(source, aug, 2, seed=5))]
    for images, masks in batches:
        assert images.dtype == tf.float32 and masks.dtype == tf.int32 and masks.shape == (2, 32, 32)
        assert -1 <= float(tf.reduce_min(images)) and float(tf.reduce_max(images)) <= 1
        for image, mask in zip(_unit_to_pixels(images), masks.numpy()):
            check_paired(image, np.where(mask == IGNORE, ids_of_colours(image), mask))
    resumed = next(iter(pipeline.train_dataset(source, aug, 2, seed=5, start=4)))  # examples 4, 5: the third batch
    np.testing.assert_array_equal(resumed[1], batches[2][1])
    np.testing.assert_allclose(resumed[0], batches[2][0])


def test_evaluation_batches_whole_images_and_pads_with_ignored_targets(coded_folder):
    source = load_dense_source(coded_folder, "depth", val_fraction=0.5)  # 3 validation pairs
    batches = list(pipeline.eval_dataset(source, 32, 2, pad_to_multiple=2))
    assert [b[1].shape[0] for b in batches] == [2, 2] and batches[0][1].dtype == tf.float32
    np.testing.assert_array_equal(batches[1][1][1], np.zeros((32, 32)))  # the padding: depth 0, not measured
    image, depth = _unit_to_pixels(batches[0][0][0]), batches[0][1][0].numpy()
    ids = ids_of_colours(image)
    assert (ids >= 0).mean() > 0.3
    np.testing.assert_array_equal(depth[ids >= 0], np.where(depth[ids >= 0] == IGNORE, IGNORE, ids[ids >= 0]))
    semantic = load_dense_source(coded_folder, "semantic", val_fraction=0.5)
    padded = list(pipeline.eval_dataset(semantic, 32, 2, pad_to_multiple=2))[1][1][1]
    assert np.all(padded.numpy() == IGNORE)
