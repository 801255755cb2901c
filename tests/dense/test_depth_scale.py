"""`depth_scale`: 16-bit depth PNGs that hold depth x a scale (KITTI x 256, NYU's millimetres x 1000), read
divided by it in training and evaluation, recorded in the run's config.json, and written with it by
`keras-vit predict`."""

import json
import os

import numpy as np
import pytest
from PIL import Image

from keras_vit.cli import main
from keras_vit.dense import pipeline
from keras_vit.dense.sources import load_source
from keras_vit.evaluation.dense import evaluate_dense
from keras_vit.training import recipe, train
from tests.support import JIT
from tests.support.commands import fails
from tests.support.dense_data import shape_sample

SCALE = 256


@pytest.fixture(scope="module")
def kitti_like(tmp_path_factory):
    """Eight 24 x 24 images with depth in metres (1 + class id + a ramp, 0 where not measured),
    stored as uint16 PNGs of metres x 256."""
    root = tmp_path_factory.mktemp("kitti")
    rng = np.random.default_rng(3)
    metres = {}
    for name in ("images", "depth"):
        os.makedirs(root / name)
    for i in range(8):
        image, mask = shape_sample(rng, 24)
        depth = 1.0 + mask + np.linspace(0, 2, 24)[None, :]
        depth[:2, :2] = 0
        metres[i] = np.round(depth * SCALE) / SCALE  # what the file can hold
        Image.fromarray(image).save(root / "images" / f"{i}.png")
        Image.fromarray(np.round(depth * SCALE).astype(np.uint16)).save(root / "depth" / f"{i}.png")
    return str(root), metres


@pytest.mark.backend_independent  # tf.data / PIL
def test_16_bit_pngs_are_read_divided_by_the_scale(kitti_like):
    root, metres = kitti_like
    scaled = load_source(root, "depth", depth_scale=SCALE, val_fraction=0.25)
    raw = load_source(root, "depth", val_fraction=0.25)  # the default: the values as they are
    for (image, target), (_, stored) in zip(pipeline.loaded(scaled, "validation"), pipeline.loaded(raw, "validation")):
        i = next(k for k, m in metres.items() if np.array_equal(stored.numpy(), np.round(m * SCALE)))
        np.testing.assert_array_equal(target.numpy(), metres[i].astype(np.float32))
    with pytest.raises(ValueError, match=r"depth_scale=0 must be a number > 0 \(a 16-bit depth PNG holds depth x"):
        load_source(root, "depth", depth_scale=0)


@pytest.fixture(scope="module")
def run(kitti_like, tmp_path_factory):
    """A tiny depth run on the folder with depth_scale=256."""
    config = recipe("digits", task="depth", data=kitti_like[0], depth_scale=SCALE, image_size=16, patch_size=8,
                    hidden_dim=16, depth=1, num_heads=2, mlp_dim=32, batch_size=3, steps=2, tensorboard=False,
                    verbose=0, val_fraction=0.25, output_dir=str(tmp_path_factory.mktemp("run") / "run"),
                    jit_compile=JIT)
    return train(config)


@pytest.mark.backend_independent  # how the data is read and written; the model runs alike on each backend
def test_the_run_records_the_scale_and_evaluate_reuses_it(run):
    with open(os.path.join(run.run_dir, "config.json")) as handle:
        assert json.load(handle)["depth_scale"] == SCALE
    recorded = evaluate_dense(run.best_path)
    assert recorded == evaluate_dense(run.best_path, depth_scale=SCALE)
    assert recorded["rmse"] != evaluate_dense(run.best_path, depth_scale=1)["rmse"]  # raw values: other targets


@pytest.mark.backend_independent  # how the data is read and written; the model runs alike on each backend
def test_predict_writes_16_bit_pngs_of_depth_times_the_scale(run, kitti_like, tmp_path, capsys):
    image = os.path.join(kitti_like[0], "images", "5.png")
    assert main(["predict", image, "--model", run.run_dir, "--output", str(tmp_path / "maps.npz")]) == 0
    depth = np.load(tmp_path / "maps.npz")[image]
    assert main(["predict", image, "--model", run.run_dir, "--out-dir", str(tmp_path / "run_scale")]) == 0
    assert main(["predict", image, "--model", run.run_dir, "--out-dir", str(tmp_path / "mm"), "--depth-scale", "1000"]) == 0
    for folder, scale in (("run_scale", SCALE), ("mm", 1000)):
        with Image.open(tmp_path / folder / "5.png") as png:
            assert png.mode.startswith("I;16")
            np.testing.assert_array_equal(np.asarray(png), np.round(np.clip(depth.astype(np.float64) * scale, 0, 65535)))
    fails(["predict", image, "--model", run.run_dir, "--out-dir", tmp_path / "bad", "--depth-scale", "0"], capsys,
          "depth_scale=0.0 must be a number > 0")
    fails(["predict", image, "--model", run.run_dir, "--out-dir", tmp_path / "bad", "--bits", "8", "--depth-scale",
           "256"], capsys, "A depth scale writes 16-bit PNGs")
    assert not os.path.exists(tmp_path / "bad")


@pytest.mark.backend_independent
def test_a_depth_scale_for_segmentation_is_refused(kitti_like, tmp_path, capsys):
    fails(["train", "--task", "segmentation", "--data", kitti_like[0], "--depth-scale", "256", "--output-dir",
           tmp_path / "run"], capsys, "depth_scale=256.0 is for task depth")
    assert not os.path.exists(tmp_path / "run")
