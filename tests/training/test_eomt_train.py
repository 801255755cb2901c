"""EoMT trained through the dense engine (`task="segmentation", head="eomt"`) on generated shapes:
validation mIoU above the all-background map's, `keras-vit evaluate` of the run agreeing with it,
the masks annealed away by the end, kill and resume, and the options EoMT refuses."""

import os

import keras
import numpy as np
import pytest

from keras_vit.cli import main
from keras_vit.dense.scores import confusion_matrix, segmentation_scores
from keras_vit.evaluation.dense import evaluate_dense, recorded_dense_source
from keras_vit.dense.pipeline import load_pair
from keras_vit.run_folder import load_model
from keras_vit.training import recipe, train
from tests.support import BACKEND
from tests.support.dense_data import write_shapes
from tests.support.runs import EveryStep, saved_weights

pytest.importorskip("scipy")

TINY = dict(
    task="segmentation", head="eomt", image_size=32, patch_size=8, hidden_dim=32, depth=2, num_heads=2, mlp_dim=64,
    batch_size=8, optimizer="adamw", learning_rate=3e-3, warmup_steps=2, weight_decay=0.0, drop_path=0.0,
    label_smoothing=0.0, crop_area=(0.5, 1.0), tensorboard=False, verbose=0, val_fraction=0.25, deterministic=True,
    monitor="val_miou",
)


@pytest.fixture(scope="module")
def shapes(tmp_path_factory):
    return write_shapes(str(tmp_path_factory.mktemp("shapes")), count=48, size=32)


def _background_miou(run_path):
    """The validation mIoU of a map that says "background" everywhere."""
    source = recorded_dense_source(run_path, "semantic")
    confusion = np.zeros((4, 4), np.int64)
    for image_path, mask_path in source.validation:
        target = load_pair(image_path, mask_path, "semantic")[1].numpy()
        confusion += confusion_matrix(target, np.zeros_like(target), 4)
    return segmentation_scores(confusion)["miou"]


def test_eomt_trains_above_the_background_and_evaluate_agrees(shapes, tmp_path):
    result = train(recipe("digits", **TINY, steps=30, output_dir=str(tmp_path / "run")), data=shapes)
    losses = result.history["loss"]
    assert losses[-1] < 0.6 * losses[0]
    baseline = _background_miou(result.best_path)
    assert result.scores["miou"] > baseline + 0.03, (result.scores, baseline)
    evaluated = evaluate_dense(result.best_path)
    assert abs(evaluated["miou"] - result.scores["miou"]) < 1e-4
    final = keras.saving.load_model(result.final_path)
    annealers = [layer for layer in final.layers if layer.name.startswith("eomt_annealing")]
    assert len(annealers) == 1 and float(annealers[0].probability()) == 0.0  # no masks left at the end
    assert set(final.output) == {"class_queries_logits", "masks_queries_logits"}
    _, names, _ = load_model(result.best_path)  # as `keras-vit predict` reads a run folder
    assert names == ["background", "square", "disc", "triangle"]


@pytest.mark.skipif(BACKEND != "torch", reason="three runs: the engine's resume is tested on every backend in "
                    "test_dense_train.py; EoMT's own state (annealing steps, random drops) on PyTorch")
def test_kill_and_resume_ends_with_the_weights_of_an_uninterrupted_run(shapes, tmp_path):
    config = recipe("digits", **{**TINY, "depth": 1, "monitor": "val_loss"}, steps=3, checkpoint_every=2,
                    output_dir=str(tmp_path / "run"))
    whole = train(config.replace(output_dir=str(tmp_path / "whole")), data=shapes)
    with pytest.raises(KeyboardInterrupt):
        train(config, data=shapes, callbacks=[EveryStep(kill_after=3)])  # the state of step 2 saved
    resumed = train(config, data=shapes)
    assert resumed.resumed_from == 2 and resumed.steps == 3
    expected, got = saved_weights(whole.final_path), saved_weights(resumed.final_path)
    assert expected.keys() == got.keys() and any("annealing" in key for key in expected)
    for key in expected:
        np.testing.assert_allclose(got[key], expected[key], atol=1e-6, err_msg=key)


@pytest.mark.backend_independent
@pytest.mark.parametrize("extra, says", [(["--task", "depth"], "head=eomt segments"),
                                         (["--task", "segmentation", "--freeze-backbone", "true"], "freeze_backbone")])
def test_command_line_refuses_what_eomt_does_not_take(shapes, tmp_path, capsys, extra, says):
    out = str(tmp_path / "cli")
    assert main(["train", "--head", "eomt", *extra, "--data", shapes, "--output-dir", out, "--steps", "1"]) == 2
    err = capsys.readouterr().err
    assert says in err and len(err.strip().splitlines()) == 1 and not os.path.exists(out)
