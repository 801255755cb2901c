"""Dense training through the engine (`task="segmentation" | "depth"`): loss falling on generated
shapes, kill and resume, a frozen backbone, layer decay, the command line and its bad input."""

import json
import os

import keras
import numpy as np
import pytest

from keras_vit.cli import main
from keras_vit.training import recipe, train
from tests.support import JIT
from tests.support.dense_data import write_shapes
from tests.support.runs import EveryStep, saved_weights

TINY = dict(
    image_size=32, patch_size=8, hidden_dim=32, depth=1, num_heads=2, mlp_dim=64, batch_size=8,
    optimizer="adamw", learning_rate=3e-3, warmup_steps=2, weight_decay=0.0, drop_path=0.0, label_smoothing=0.0,
    crop_area=(0.5, 1.0), tensorboard=False, verbose=0, val_fraction=0.25, deterministic=True,
    jit_compile=JIT,
)


@pytest.fixture(scope="module")
def shapes(tmp_path_factory):
    return write_shapes(str(tmp_path_factory.mktemp("shapes")), count=32, size=32, depth=True)


def _config(tmp_path, task="segmentation", **overrides):
    return recipe("digits", **{**TINY, "task": task, "output_dir": str(tmp_path / "run"), **overrides})


def test_segmentation_loss_falls_and_the_run_folder_records_the_task(shapes, tmp_path):
    result = train(_config(tmp_path, steps=12), data=shapes)
    losses = result.history["loss"]
    assert losses[-1] < 0.8 * losses[0]
    assert set(result.scores) == {"loss", "accuracy", "miou"} and result.scores["accuracy"] > 0.5
    with open(os.path.join(result.run_dir, "classes.json")) as handle:
        recorded = json.load(handle)
    assert recorded["task"] == "semantic" and recorded["class_names"][1] == "square"
    model = keras.saving.load_model(result.best_path)
    assert model.output_shape == (None, 32, 32, 4)
    assert getattr(model, "optimizer", None) is None  # saved uncompiled: loads in a process that never imported the training code


def test_kill_and_resume_ends_with_the_weights_of_an_uninterrupted_run(shapes, tmp_path):
    config = _config(tmp_path, steps=3, checkpoint_every=2, task="depth")
    whole = train(config.replace(output_dir=str(tmp_path / "whole")), data=shapes)
    with pytest.raises(KeyboardInterrupt):
        train(config, data=shapes, callbacks=[EveryStep(kill_after=3)])  # the state of step 2 saved
    resumed = train(config, data=shapes)
    assert resumed.resumed_from == 2 and resumed.steps == 3 and set(resumed.scores) == {"loss", "accuracy"}
    expected, got = saved_weights(whole.final_path), saved_weights(resumed.final_path)
    assert expected.keys() == got.keys()
    for key in expected:
        np.testing.assert_allclose(got[key], expected[key], atol=1e-6, err_msg=key)


def test_frozen_backbone_trains_the_head_alone_and_layer_decay_scales_the_blocks(shapes, tmp_path):
    recorder = EveryStep()
    frozen = train(_config(tmp_path, steps=2, freeze_backbone=True, output_dir=str(tmp_path / "frozen")), data=shapes,
                   callbacks=[recorder])
    trained = {path.split("/")[0] for path in recorder.steps[0]}
    assert trained == {"linear_head"}, trained
    watch = EveryStep()
    decayed = train(_config(tmp_path, steps=2, layer_decay=0.5), data=shapes, callbacks=[watch])
    scales = watch.model.optimizer.lr_scales
    assert scales and min(scales.values()) == 0.5 ** 2  # the embeddings of a one-block ViT
    assert not any(path.startswith("linear_head") for path in scales)
    assert frozen.steps == decayed.steps == 2


@pytest.mark.backend_independent  # the command line's handling; each backend trains in the tests above
def test_command_line_trains_and_reports_the_scores(shapes, tmp_path, capsys):
    out = str(tmp_path / "cli")
    args = ["train", "--task", "segmentation", "--data", shapes, "--output-dir", out, "--steps", "2", "--image-size", "32",
            "--patch-size", "8", "--hidden-dim", "32", "--depth", "1", "--num-heads", "2", "--mlp-dim", "64",
            "--batch-size", "8", "--head", "dpt", "--tensorboard", "false", "--verbose", "0"]
    assert main(args) == 0
    assert "Validation accuracy" in capsys.readouterr().out and "miou" in open(os.path.join(out, "log.csv")).read()


@pytest.mark.backend_independent
@pytest.mark.parametrize("break_it, flags, message", [
    ("mask_size", [], "has its image's size"),
    ("class_id", [], "ids must be below 4"),
    ("no_masks", [], "has images/ but no masks/ folder"),
    ("nan_depth", ["--task", "depth"], "NaN, infinite or negative depth"),
    (None, ["--mixup", "0.8"], "task=segmentation takes no mixup"),
    (None, ["--task", "classification", "--freeze-backbone", "true"], "freeze_backbone is for task segmentation"),
])
def test_bad_input_from_the_command_line_is_one_line_exit_2_and_nothing_written(tmp_path, capsys, break_it, flags,
                                                                                message):
    from PIL import Image

    data = write_shapes(str(tmp_path / "data"), count=4, size=16, depth=True)
    if break_it == "mask_size":
        Image.fromarray(np.zeros((8, 16), np.uint8)).save(os.path.join(data, "masks", "0001.png"))
    elif break_it == "class_id":
        Image.fromarray(np.full((16, 16), 9, np.uint8)).save(os.path.join(data, "masks", "0001.png"))
    elif break_it == "no_masks":
        os.rename(os.path.join(data, "masks"), os.path.join(data, "labels"))
    elif break_it == "nan_depth":
        np.save(os.path.join(data, "depth", "0002.npy"), np.full((16, 16), np.nan, np.float32))
    out = str(tmp_path / "run")
    assert main(["train", "--task", "segmentation", "--data", data, "--output-dir", out, *flags]) == 2
    error = capsys.readouterr().err.strip()
    assert message in error and "\n" not in error
    assert not os.path.exists(out)
