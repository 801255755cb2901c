"""The run engine that `train` and `pretrain` share, and config fields declared once: what
`pretrain` used to do differently (remat, verbosity), configs validated when made (before any
data or weights), recipes refused by the other function, a toy field added in one edit."""

import argparse
import dataclasses
import json
import math
import re

import pytest

from keras_vit.cli import main
from keras_vit.training import TrainConfig, pretrain, recipe, train
from keras_vit.training.pretrain import build_encoder
from tests.support import JIT
from tests.support.commands import fails

TINY = dict(
    model="custom", patch_size=2, hidden_dim=16, depth=1, num_heads=2, mlp_dim=32, image_size=8, batch_size=32,
    crop_area=(1.0, 1.0), crop_aspect=(1.0, 1.0), tensorboard=False, jit_compile=JIT,
)


def test_pretrain_encoder_honours_remat():
    encoder = build_encoder(recipe("masked_patch_digits", remat=True))
    assert encoder.get_layer("encoder").remat is True


def test_pretrain_logged_to_a_file_writes_one_line_per_epoch(tmp_path, capsys):
    """stdout is not a terminal under capsys: verbose="auto" must be one line per epoch, no bar."""
    result = pretrain(recipe("masked_patch_digits", **TINY, steps=4, warmup_steps=1, output_dir=str(tmp_path)),
                      verbose="auto")
    out = capsys.readouterr().out
    epochs = len(result.history["loss"])
    assert "━" not in out and "\r" not in out and "\b" not in out
    assert len(re.findall(r"^\d+/\d+ - .* - val_loss: ", out, re.M)) == epochs >= 1, out


@pytest.mark.parametrize(
    "field, value, accepted",
    [("optimizer", "sgdd", "sgd, adam, adamw"), ("schedule", "cosin", "cosine, linear, constant"),
     ("lr_scaling", "square", "none, linear, sqrt"), ("precision", "fp16", "auto, float32")],
)
def test_a_bad_choice_fails_before_data_or_weights(tmp_path, field, value, accepted):
    """The data folder does not exist and the weights would be downloaded: neither is reached."""
    missing = str(tmp_path / "no_such_folder")
    with pytest.raises(ValueError, match=re.escape(f"{field}={value!r}; expected one of {accepted}")):
        train("finetune", data=missing, output_dir=str(tmp_path / "run"), **{field: value})
    with pytest.raises(ValueError, match=field):
        TrainConfig(**{field: value})


@pytest.mark.parametrize(
    "overrides, message",
    [({"flip": "yes"}, "flip='yes' must be true/false"), ({"epochs": 2.5}, "epochs=2.5 must be an integer"),
     ({"crop_area": (0.1,)}, "crop_area=(0.1,) must be 2 finite numbers"), ({"verbose": 3}, "verbose=3")],
)
def test_types_and_shapes_are_checked_when_made(overrides, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        recipe("digits", **overrides)


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_mask_split_must_be_finite(tmp_path, capsys, value):
    with pytest.raises(ValueError, match="mask_split=.* must be 3 finite numbers"):
        recipe("masked_patch_digits", mask_split=(value, 0.1, 0.1))
    missing = str(tmp_path / "no_such_folder")
    assert main(["pretrain", f"--mask-split={value},0.1,0.1", "--data", missing]) == 2
    err = capsys.readouterr().err
    assert "mask_split" in err and "finite" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "function, recipe_name, right",
    [(train, "masked_patch", "pretrain"), (train, "masked_patch_digits", "pretrain"), (pretrain, "digits", "train"),
     (pretrain, "finetune", "train")],
)
def test_a_recipe_of_the_other_function_is_refused(tmp_path, function, recipe_name, right):
    missing = str(tmp_path / "no_such_folder")  # were it not refused, the run would stop here
    with pytest.raises(ValueError, match=rf"keras_vit\.training\.{right}\(\) \(keras-vit {right}\)"):
        function(recipe_name, data=missing, output_dir=str(tmp_path / "run"))
    with pytest.raises(ValueError, match=f"keras-vit {right}"):
        function(recipe(recipe_name), data=missing, output_dir=str(tmp_path / "run"))


def test_the_command_line_refuses_a_recipe_of_the_other_command(tmp_path, capsys):
    missing = str(tmp_path / "no_such_folder")
    assert main(["train", "--recipe", "masked_patch", "--data", missing]) == 2
    err = capsys.readouterr().err
    assert "pre-training recipe" in err and "keras-vit pretrain" in err and len(err.strip().splitlines()) == 1
    assert main(["pretrain", "--recipe", "digits", "--data", missing]) == 2
    assert "keras-vit train" in capsys.readouterr().err


def test_negative_layer_norm_epsilon_is_refused_from_the_builder():
    from keras_vit import VisionTransformer

    for epsilon in (-1e-6, 0.0, math.nan):
        with pytest.raises(ValueError, match="layer_norm_epsilon=.* must be a positive finite number"):
            VisionTransformer(patch_size=4, hidden_dim=16, depth=1, num_heads=2, mlp_dim=32, input_shape=(8, 8, 3),
                              layer_norm_epsilon=epsilon)


def test_negative_layer_norm_epsilon_is_refused_from_a_checkpoint(tmp_path):
    from keras_vit import VisionTransformer
    from keras_vit.weights import export

    model = VisionTransformer(patch_size=4, hidden_dim=16, depth=1, num_heads=2, mlp_dim=32, input_shape=(8, 8, 3),
                              classes=3)
    folder = tmp_path / "hf"
    export(model, str(folder), format="hf")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "layer_norm_eps": -1e-6}))
    with pytest.raises(ValueError, match="layer_norm_epsilon=-1e-06.*(positive finite number|finite number > 0)"):
        VisionTransformer(patch_size=4, hidden_dim=16, depth=1, num_heads=2, mlp_dim=32, classes=3,
                          weights=str(folder))


def test_adding_a_field_is_one_declaration(capsys):
    from keras_vit.config import fields

    @dataclasses.dataclass
    class ToyConfig(TrainConfig):
        """`TrainConfig` with one more field: the one edit that adding a field takes."""

        toy_rate: float = fields.option(0.5, "a toy rate", group="toy", interval="(0, 1)")

    assert ToyConfig().toy_rate == 0.5 and ToyConfig(toy_rate=0.25).toy_rate == 0.25
    with pytest.raises(ValueError, match=re.escape("toy_rate=1.5 must be in (0, 1)")):
        ToyConfig(toy_rate=1.5)  # validated when made
    parser = argparse.ArgumentParser(prog="toy")
    fields.add_flags(parser, ToyConfig)
    assert parser.parse_args(["--toy-rate", "0.1"]).toy_rate == 0.1
    assert not hasattr(parser.parse_args([]), "toy_rate")  # not given: the default stays
    with pytest.raises(SystemExit):
        parser.parse_args(["--toy-rate", "many"])
    parser.print_help()
    help_text = capsys.readouterr().out
    assert "toy options:" in help_text and "--toy-rate FLOAT" in help_text and "a toy rate" in help_text
    assert "| `--toy-rate` | `0.5` | FLOAT in (0, 1) | a toy rate |" in fields.table(ToyConfig)


def test_the_field_table_lists_every_option_once():
    from keras_vit.training.config import field_table

    table = field_table()
    for field in dataclasses.fields(TrainConfig):
        if field.name != "recipe":
            assert table.count(f"| `--{field.name.replace('_', '-')}` |") == 1, field.name
    assert "| `--optimizer` | `sgd` | `sgd`, `adam`, `adamw`, `muon`, `lamb`, `lion`, `adafactor` |" in table
    assert "train[:90%]" in table  # not argparse's %% escape


HUGE = "99999999999999999999"


@pytest.mark.parametrize("command", ["train", "pretrain"])
@pytest.mark.parametrize(
    "argv, message",
    [(["--batch-size", HUGE], f"batch_size={HUGE} must be in [1, 1048576]"),
     (["--steps", HUGE], f"steps={HUGE} must be in [1, 1000000000]"),
     (["--epochs", HUGE], f"epochs={HUGE} must be in [1, 1000000000]"),
     (["--monitor", "val_top1"], "monitor='val_top1' is not a metric this run logs; expected one of loss"),
     (["--set", "data="], "data='' must name the data: 'digits', a tensorflow-datasets name"),
     (["--data", " "], "data=' ' must name the data")],
)
def test_a_bad_command_line_value_is_one_line_before_the_data(tmp_path, capsys, command, argv, message):
    """Out-of-range counts, a metric the run does not log, no data: refused before anything is read or written."""
    run_dir = tmp_path / "run"
    fails([command, "--output-dir", run_dir, *argv], capsys, message)
    assert not run_dir.exists()


@pytest.mark.parametrize("function, recipe_name, logged", [
    (train, "digits", "loss, accuracy, top5, val_loss, val_accuracy, val_top5"),
    (pretrain, "masked_patch_digits", "loss, accuracy, val_loss, val_accuracy"),
])
def test_monitor_names_what_the_run_logs(tmp_path, function, recipe_name, logged):
    with pytest.raises(ValueError, match=re.escape(f"expected one of {logged}.")):
        function(recipe_name, output_dir=str(tmp_path / "run"), monitor="top1")
    with pytest.raises(ValueError, match="or fewshot_Kshot"):
        function(recipe_name, output_dir=str(tmp_path / "run"), monitor="fewshot_top1", fewshot_every=5)
