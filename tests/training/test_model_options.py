"""The builder's block options as training options (`keras-vit train --set qk_norm=true`, `--mlp swiglu`),
derived from their one declaration in `keras_vit.config.vit_config`."""

import keras

from keras_vit.cli import main
from tests.support.commands import TINY_TRAIN_FLAGS, fails

OPTIONS = ["--set", "qk_norm=true", "--set", "norm=rmsnorm", "--set", "qkv_bias=false", "--set", "mlp=swiglu",
           "--set", "layer_scale_init=0.5", "--set", "patch_drop_rate=0.25", "--patch-norm", "true",
           "--mlp-bias", "false"]


def test_a_run_builds_and_saves_the_model_with_the_options_set(tmp_path):
    run_dir = tmp_path / "run"
    assert main(["train", "--output-dir", str(run_dir), *TINY_TRAIN_FLAGS, *OPTIONS]) == 0
    model = keras.saving.load_model(run_dir / "final.keras")
    encoder = model.get_layer("encoder").get_config()
    assert {k: encoder[k] for k in ("qk_norm", "norm", "qkv_bias", "mlp", "layer_scale_init", "mlp_bias",
                                    "proj_bias")} == dict(
        qk_norm=True, norm="rmsnorm", qkv_bias=False, mlp="swiglu", layer_scale_init=0.5, mlp_bias=False,
        proj_bias=True)
    assert model.get_layer("patch_dropout").get_config()["rate"] == 0.25
    assert type(model.get_layer("embedding_norm")).__name__ == "RMSNorm"


def test_bad_values_and_combinations_exit_2_in_one_line(capsys):
    fails(["train", "--set", "norm=batchnorm"], capsys, "Unknown norm='batchnorm'", "layernorm, rmsnorm")
    fails(["train", "--set", "qk_norm=maybe"], capsys, "Bad value for qk_norm")
    fails(["train", "--set", "patch_drop_rate=1.5"], capsys, "patch_drop_rate=1.5 must be in [0, 1)")
    fails(["train", "--set", "position_embedding=rope", "--set", "patch_drop_rate=0.1"], capsys,
          "patch_drop_rate with position_embedding='rope' is not supported")
