"""`keras-vit train --model NAME` for every named model of `list_models()` (the family files'),
with its family's options, and from a checkpoint with `--weights`."""

import re

import keras
import pytest

from keras_vit.cli import main
from keras_vit.families import FAMILIES, HYBRIDS
from keras_vit.config.vit_config import ViTConfig
from keras_vit.training.config import NOT_ARCHITECTURE
from keras_vit.training.recipes import TrainConfig
from keras_vit.variants import list_models
from tests.support.commands import TINY_TRAIN_FLAGS

ARCHITECTURE = ["--patch-size", "4", "--hidden-dim", "16", "--depth", "1", "--num-heads", "2", "--mlp-dim", "32"]
FLAGS = [*TINY_TRAIN_FLAGS, "--image-size", "16", *ARCHITECTURE, "--steps", "2"]


@pytest.mark.backend_independent
@pytest.mark.parametrize("name", [name for name in list_models() if name not in HYBRIDS])
def test_every_named_model_is_a_training_model_with_its_family_options(name):
    config = TrainConfig(model=name)
    options = {k: v for k, v in FAMILIES.get(name, {}).items() if k not in NOT_ARCHITECTURE}
    assert {k: config.architecture()[k] for k in options} == options
    ViTConfig(**config.architecture(), pooling=config.head_pooling)  # a model the builder accepts


@pytest.mark.backend_independent
def test_an_unknown_model_is_refused_listing_what_is_accepted(capsys):
    with pytest.raises(SystemExit) as exit:
        main(["train", "--model", "ViTZ16"])
    err = capsys.readouterr().err
    assert exit.value.code == 2 and "invalid choice: 'ViTZ16'" in err
    assert all(f"'{name}'" in err for name in (*list_models(), "custom"))
    with pytest.raises(ValueError, match=r"Unknown model='ViTZ16'; expected one of ViTTi16, .*DINOv2S14, .*custom\."):
        TrainConfig(model="ViTZ16")


def test_a_family_model_trains_and_fine_tunes_from_the_command_line(tmp_path, capsys):
    """SigLIP (no class token, tanh GELU; the digits recipe pools by the mean) at a tiny size on the
    digits; then from its checkpoint with `--weights` and learning rate 0: the same validation accuracy."""
    assert main(["train", "--model", "SigLIPB16", "--output-dir", str(tmp_path / "a"), *FLAGS]) == 0
    top1 = re.search(r"Validation top-1 (0\.\d{4})", capsys.readouterr().out).group(1)
    model = keras.saving.load_model(tmp_path / "a" / "final.keras")
    names = [layer.name for layer in model.layers]
    assert "class_token" not in names and model.get_layer("pooling").get_config()["mode"] == "avg"
    assert model.get_layer("encoder").get_config()["approximate_gelu"] is True
    flags = [*FLAGS, "--weights", str(tmp_path / "a" / "best.keras"), "--learning-rate", "0"]
    assert main(["train", "--model", "SigLIPB16", "--output-dir", str(tmp_path / "b"), *flags]) == 0
    assert f"Validation top-1 {top1}" in capsys.readouterr().out
