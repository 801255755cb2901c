"""DINOv3 from KerasHub `DINOV3Backbone` presets saved here with random weights, against
keras-hub's own outputs (the independent reference) at the native size and another."""

import keras
import numpy as np
import pytest

import keras_vit

keras_hub = pytest.importorskip("keras_hub")

TINY = dict(patch_size=4, num_layers=2, hidden_dim=32, num_heads=2, intermediate_dim=64, num_register_tokens=4,
            use_key_bias=False, layer_scale_init_value=1e-5, layer_norm_eps=1e-5)


def _backbone(size=(16, 16), **options):
    return keras_hub.models.DINOV3Backbone(**{**TINY, **options}, image_shape=(*size, 3))


def _preset(folder, **options):
    backbone = _backbone(**options)
    rng = np.random.default_rng(len(options))
    for variable in backbone.weights:
        scale = variable.shape[0] ** -0.5 if len(variable.shape) == 2 else 0.3
        base = 0.6 if "norm" in variable.path and variable.path.endswith(("gamma", "vars/0")) else 0.0
        variable.assign((base + scale * rng.normal(size=variable.shape)).astype("float32"))
    backbone.save_to_preset(str(folder))
    return backbone


@pytest.mark.parametrize("options", [{}, dict(use_gated_mlp=True, hidden_activation="silu", rope_theta=50.0),
                                     dict(use_proj_bias=False, use_mlp_bias=False)],
                         ids=["mlp", "swiglu", "bias_free"])
def test_kerashub_dinov3_preset_matches_kerashub(tmp_path, options):
    native = _preset(tmp_path / "preset", **options)
    model = keras_vit.from_checkpoint(str(tmp_path / "preset"), input_shape=(None, None, 3))
    assert model.preprocessing == "dinov3" and model.get_layer("encoder").key_bias is False
    for size in ((16, 16), (12, 20)):
        reference = _backbone(size, **options)  # keras-hub's rope needs a fixed image shape
        reference.set_weights(native.get_weights())
        x = np.random.default_rng(0).uniform(-1, 1, (2, *size, 3)).astype(np.float32)
        expected = keras.ops.convert_to_numpy(reference({"pixel_values": x}))
        np.testing.assert_allclose(keras.ops.convert_to_numpy(model(x)), expected, atol=1e-5, rtol=0)


def test_kerashub_dinov3_with_a_query_bias_only_is_refused_in_one_line(tmp_path):
    _preset(tmp_path / "preset", use_value_bias=False)
    with pytest.raises(ValueError, match=r"^[^\n]*a bias on the queries or the values only"):
        keras_vit.from_checkpoint(str(tmp_path / "preset"))
