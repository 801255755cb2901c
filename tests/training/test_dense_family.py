"""`keras-vit train --task segmentation | depth --model NAME`: every named model of `list_models()` (the
family files') as the dense backbone, with its family's options, started from a checkpoint with `--weights`."""

import os

import keras
import numpy as np
import pytest

from keras_vit.cli import main
from keras_vit.families import FAMILIES, HYBRIDS
from keras_vit.training import recipe
from keras_vit.training.config import NOT_ARCHITECTURE
from keras_vit.training.dense import build_dense_model
from keras_vit.variants import list_models
from tests.support import JIT
from tests.support.dense_data import write_shapes
from tests.support.runs import weights_by_path

ARCHITECTURE = dict(image_size=16, patch_size=4, hidden_dim=16, depth=1, num_heads=2, mlp_dim=32)


@pytest.mark.backend_independent
@pytest.mark.parametrize("name", [name for name in list_models() if name not in HYBRIDS])
def test_every_named_model_is_a_dense_backbone_with_its_family_options(name):
    config = recipe("digits", task="segmentation", model=name, **ARCHITECTURE)
    model, backbone, _ = build_dense_model(config, num_classes=3)
    assert model.output_shape == (None, 16, 16, 3)
    options = {k: v for k, v in FAMILIES.get(name, {}).items() if k not in NOT_ARCHITECTURE}
    built = backbone.get_config()
    assert {k: built[k] for k in options if k in built} == {k: v for k, v in options.items() if k in built}


@pytest.mark.backend_independent  # the model the command builds and loads; each backend trains in test_dense_train.py
def test_a_family_model_trains_from_weights_on_the_command_line(tmp_path, capsys):
    """DINOv2-S/14 shrunk, started with `--weights` from a `.keras` file of its ViT, frozen: the dense
    run's backbone holds that file's weights exactly."""
    data = write_shapes(str(tmp_path / "shapes"), count=6, size=28)
    import keras_vit

    vit = keras_vit.DINOv2S14(weights=None, include_top=False, patch_size=14, hidden_dim=16, depth=1, num_heads=2,
                              mlp_dim=32, input_shape=(28, 28, 3))
    vit.save(str(tmp_path / "vit.keras"))
    out = str(tmp_path / "run")
    args = ["train", "--task", "segmentation", "--model", "DINOv2S14", "--weights", str(tmp_path / "vit.keras"),
            "--data", data, "--image-size", "28", "--patch-size", "14", "--hidden-dim", "16", "--depth", "1",
            "--num-heads", "2", "--mlp-dim", "32", "--steps", "1", "--batch-size", "2", "--freeze-backbone", "true",
            "--tensorboard", "false", "--verbose", "0", "--output-dir", out,
            "--set", f"jit_compile={JIT}"]
    assert main(args) == 0, capsys.readouterr().err
    dense = keras.saving.load_model(os.path.join(out, "final.keras"))
    got = weights_by_path(dense.get_layer("backbone"))
    expected = {path.removeprefix("encoder/"): array for path, array in weights_by_path(vit).items()}
    assert got.keys() == expected.keys() and "encoderblock_0/ls_1/gamma" in got  # DINOv2's layer scale
    for path in got:
        np.testing.assert_array_equal(got[path], expected[path], err_msg=path)


@pytest.mark.backend_independent
def test_an_unknown_model_name_is_refused_for_a_dense_task(tmp_path, capsys):
    data = write_shapes(str(tmp_path / "shapes"), count=4, size=16)
    with pytest.raises(SystemExit) as exit:
        main(["train", "--task", "segmentation", "--data", data, "--model", "DINOv2Z14",
              "--output-dir", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert exit.value.code == 2 and "invalid choice: 'DINOv2Z14'" in err and "'DINOv2S14'" in err
    assert not os.path.exists(tmp_path / "run")
