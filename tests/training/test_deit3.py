"""`--recipe deit3` and the options it is made of: binary cross-entropy, the per-size stochastic
depth, a run from the command line on every backend, and their refusals."""

import csv
import json

import keras
import numpy as np
import pytest

from keras_vit.cli import main
from keras_vit.training import recipe
from keras_vit.training.trainer import loss_and_metrics
from tests.support.commands import TINY_TRAIN_FLAGS, fails


def test_bce_is_the_mean_binary_cross_entropy_of_every_class():
    rng = np.random.default_rng(0)
    logits = rng.normal(0, 2, (4, 5)).astype("float32")
    targets = rng.dirichlet(np.ones(5), 4).astype("float32")  # mixed (MixUp / CutMix) targets
    loss, _ = loss_and_metrics(5, True, True, 0.0, "bce")
    p = 1 / (1 + np.exp(-logits.astype(np.float64)))
    want = -(targets * np.log(p) + (1 - targets) * np.log(1 - p)).mean()
    got = float(keras.ops.convert_to_numpy(loss(keras.ops.convert_to_tensor(targets), keras.ops.convert_to_tensor(logits))))
    np.testing.assert_allclose(got, want, rtol=1e-5)


@pytest.mark.backend_independent
def test_stochastic_depth_follows_the_model_size_unless_given():
    assert [recipe("deit3", model=m).drop_path for m in ("ViTS16", "ViTB16", "ViTL16")] == [0.05, 0.2, 0.45]
    assert recipe("deit3", model="ViTS16", drop_path=0.3).drop_path == 0.3
    config = recipe("deit3")
    assert (config.optimizer, config.loss, config.crop, config.three_augment, config.repeated_augment,
            config.layer_scale_init, config.label_smoothing) == ("lamb", "bce", "simple", True, 3, 1e-6, 0.0)


def test_deit3_recipe_trains_from_the_command_line(tmp_path):
    run_dir = tmp_path / "deit3"
    flags = ["--recipe", "deit3", "--data", "digits", "--batch-size", "24", "--random-erasing", "0.25"]
    assert main(["train", "--output-dir", str(run_dir), *TINY_TRAIN_FLAGS, *flags]) == 0
    with open(run_dir / "config.json") as handle:
        config = json.load(handle)
    assert (config["optimizer"], config["loss"], config["crop"], config["three_augment"]) == ("lamb", "bce", "simple", True)
    with open(run_dir / "log.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert rows and np.isfinite([float(row["loss"]) for row in rows]).all()


@pytest.mark.backend_independent
@pytest.mark.parametrize("flags, expected", [
    (["--loss", "bce", "--label-smoothing", "0.1"], "loss=bce takes no label_smoothing"),
    (["--repeated-augment", "0"], "repeated_augment"),
    (["--random-erasing", "1.5"], "random_erasing"),
    (["--color-jitter", "-0.1"], "color_jitter"),
])
def test_bad_options_are_refused_in_one_line(flags, expected, tmp_path, capsys):
    fails(["train", "--output-dir", tmp_path / "run", "--steps", "1", *flags], capsys, expected)
    assert not (tmp_path / "run").exists()
