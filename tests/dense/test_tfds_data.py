"""tensorflow-datasets builders with masks or depth as dense-training sources (`keras_vit.dense.tfds_data`),
read through `tfds.testing.mock_data` with examples written here (no network): the stored values mapped
as the table says, the pairs through the paired augmentation and into a training run, the refusals."""

import os

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

from keras_vit.data.pipeline import Augmentation
from keras_vit.dense import pipeline
from keras_vit.dense.labels import IGNORE
from keras_vit.dense.sources import load_source
from keras_vit.evaluation.dense import evaluate_dense
from keras_vit.training import recipe, train
from tests.support import JIT
from tests.support.commands import fails

SPLITS = {"train": 6, "test": 3, "validation": 3}


def trimap_example(i):
    """A 24 x 32 photo of three bands, each its own red level (80, 160, 240), and its trimap (1, 2, 3);
    the last rows 0, a value the trimap never holds (not labelled)."""
    rows = np.arange(24)[:, None] * np.ones((1, 32), int)
    bands = np.minimum(rows // 8, 2) + 1  # 1, 2, 3 from the top
    bands = np.roll(bands, i, axis=0)
    image = np.stack([80 * bands, np.full_like(bands, 30 + i), np.full_like(bands, 50)], -1).astype(np.uint8)
    trimap = bands.astype(np.uint8)
    trimap[-2:] = 0
    return {"image": image, "segmentation_mask": trimap[..., None], "file_name": f"{i}.jpg", "label": i % 37,
            "species": i % 2, "head_bbox": np.zeros(4, np.float32)}


def depth_example(i):
    """A 16 x 20 photo and its depth in metres (float16), 0 in a corner (not measured)."""
    depth = (np.arange(16 * 20).reshape(16, 20) % 9 + 1 + i).astype(np.float16) / 2
    depth[:2, :2] = 0
    image = np.repeat((depth.astype(np.float32) * 20).astype(np.uint8)[..., None], 3, -1)
    return {"image": image, "depth": depth}


def mocked(example):
    """`mock_data`'s `as_dataset_fn`: each split's examples made by `example(i)`."""
    def as_dataset(self, split, **kwargs):
        examples = [example(i) for i in range(SPLITS[str(split).split("[")[0]])]
        return tf.data.Dataset.from_tensor_slices({k: np.stack([e[k] for e in examples]) for k in examples[0]})

    return tfds.testing.mock_data(as_dataset_fn=as_dataset)


@pytest.mark.backend_independent  # tf.data code
def test_oxford_pet_trimaps_are_class_ids_and_pairs_stay_paired_through_the_augmentation():
    with mocked(trimap_example):
        source = load_source("oxford_iiit_pet", "semantic")
        assert source.class_names == ["pet", "background", "border"] and source.num_classes == 3
        assert (source.train_size, source.validation_size) == (6, 3)
        image, target = next(iter(pipeline.loaded(source, "validation")))
        expected = trimap_example(0)["segmentation_mask"][..., 0].astype(int) - 1
        np.testing.assert_array_equal(target.numpy(), np.where(expected < 0, IGNORE, expected))  # 1, 2, 3 -> 0, 1, 2
        augmentation = Augmentation(image_size=16, crop_area=(0.3, 1.0), flip=True)
        images, targets = next(iter(pipeline.train_dataset(source, augmentation, 6, seed=1)))
    assert images.shape == (6, 16, 16, 3) and targets.shape == (6, 16, 16) and targets.dtype == tf.int32
    red = (images.numpy()[..., 0] + 1) * 127.5
    exact = np.abs(red / 80 - np.round(red / 80)) < 0.01  # pixels of one band only
    assert exact.mean() > 0.5
    np.testing.assert_array_equal(targets.numpy()[exact & (targets.numpy() != IGNORE)],
                                  np.round(red / 80)[exact & (targets.numpy() != IGNORE)] - 1)


@pytest.mark.backend_independent
def test_nyu_depth_is_read_in_metres_and_resized_by_nearest_neighbour():
    with mocked(depth_example):
        source = load_source("nyu_depth_v2", "depth", val_split="validation")
        assert source.num_classes is None and source.validation_size == 3
        _, target = next(iter(pipeline.loaded(source, "validation")))
        np.testing.assert_array_equal(target.numpy(), depth_example(0)["depth"].astype(np.float32))
        images, targets = next(iter(pipeline.eval_dataset(source, 8, 3)))
    assert targets.dtype == tf.float32 and set(np.unique(targets.numpy())) <= set(np.unique(
        np.concatenate([depth_example(i)["depth"].astype(np.float32).ravel() for i in range(3)])))


@pytest.mark.backend_independent  # the data path into the loss; each backend trains in tests/training/test_dense_train.py
def test_a_tfds_source_trains_with_the_masked_loss(tmp_path):
    config = recipe("digits", task="segmentation", data="oxford_iiit_pet", image_size=16, patch_size=8, hidden_dim=16,
                    depth=1, num_heads=2, mlp_dim=32, batch_size=3, steps=2, tensorboard=False, verbose=0,
                    output_dir=str(tmp_path / "run"), jit_compile=JIT)
    with mocked(trimap_example):
        result = train(config)
        scores = evaluate_dense(result.best_path)  # the data the run recorded, each image at its own size
    assert result.steps == 2 and np.isfinite(result.history["loss"]).all()
    assert result.model.output_shape == (None, 16, 16, 3) and set(result.scores) == {"loss", "accuracy", "miou"}
    assert scores["examples"] == 3 and scores["class_names"] == ["pet", "background", "border"]


@pytest.mark.backend_independent
def test_cityscapes_label_ids_become_the_19_train_ids():
    label_ids = np.array([[7, 8, 33, 0], [26, 1, 255, 24]], np.uint8)

    def example(i):
        return {"image_left": np.zeros((2, 4, 3), np.uint8), "segmentation_label": label_ids[..., None],
                "image_id": str(i)}

    with mocked(example):
        source = load_source("cityscapes/semantic_segmentation", "semantic")
        _, target = next(iter(pipeline.loaded(source, "train")))
    assert source.num_classes == 19 and source.class_names[13] == "car"
    np.testing.assert_array_equal(target.numpy(), [[0, 1, 18, IGNORE], [13, IGNORE, IGNORE, 11]])


@pytest.mark.backend_independent
@pytest.mark.parametrize("data, task, message", [
    ("voc/2012", "segmentation", "'voc/2012' cannot train semantic: its objects are boxes"),
    ("scene_parse150", "segmentation", "ADE20K's instance annotations"),
    ("coco_captions", "segmentation", "neither a data folder (DIR/images + DIR/masks or DIR/depth) nor a "
                                      "tensorflow-datasets builder with masks or depth: oxford_iiit_pet (semantic)"),
    ("nyu_depth_v2", "segmentation", "holds depth targets, not semantic; accepted for semantic: oxford_iiit_pet, "
                                     "cityscapes"),
    ("oxford_iiit_pet", "depth", "accepted for depth: nyu_depth_v2"),
    ("cityscapes/stereo_disparity", "segmentation", "has no 'segmentation_label' feature"),
])
def test_a_builder_without_masks_is_refused_in_one_line_exit_2(tmp_path, capsys, data, task, message):
    out = tmp_path / "run"
    with mocked(trimap_example):
        fails(["train", "--task", task, "--data", data, "--output-dir", out], capsys, message)
    assert not os.path.exists(out)
