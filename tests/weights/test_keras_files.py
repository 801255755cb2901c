"""`from_checkpoint` of keras_vit's own `.keras` files for the models without a class token:
SigLIP's MAP head, registers, fixed sin-cos tables at their saved size, AIMv2's options, NaFlex,
query / key norms."""

import keras
import numpy as np
import pytest

import keras_vit
from tests.support.models import randomize

TINY = dict(patch_size=8, hidden_dim=32, depth=1, num_heads=2, mlp_dim=64, classes=3, class_token=False)
AIMV2 = dict(pooling="map", map_head="aimv2", patch_norm=True, norm="rmsnorm", qkv_bias=False, proj_bias=False,
             mlp_bias=False, mlp="swiglu", position_embedding="sincos2d", sincos_form="mae")
CASES = {
    "siglip_map": dict(pooling="map"),
    "registers": dict(pooling="avg", num_registers=2),
    "sincos_at_its_size": dict(pooling="avg", position_embedding="sincos2d"),
    "aimv2": AIMV2,
    "naflex": dict(pooling="map", naflex=True),
    "qk_layernorm": dict(pooling="avg", qk_norm=True),  # the per-head query / key norms' variables are named
    "qk_rmsnorm": dict(pooling="avg", qk_norm=True, norm="rmsnorm"),
}


def _inputs(model, naflex):
    rng = np.random.default_rng(0)
    if naflex:
        return keras_vit.naflex_inputs([rng.uniform(0, 255, (24, 40, 3)), rng.uniform(0, 255, (48, 16, 3))], model,
                                       max_num_patches=20)
    return rng.uniform(-1, 1, (2, 40, 24, 3)).astype("float32")


@pytest.mark.parametrize("case", CASES)
def test_class_token_free_keras_file_loads_with_from_checkpoint(case, tmp_path):
    options = CASES[case]
    model = randomize(keras_vit.VisionTransformer(**TINY, **options, input_shape=(40, 24, 3)))
    path = str(tmp_path / f"{case}.keras")
    model.save(path)
    loaded = keras_vit.from_checkpoint(path)
    x = _inputs(model, options.get("naflex"))
    np.testing.assert_allclose(keras.ops.convert_to_numpy(loaded.predict(x, verbose=0)),
                               keras.ops.convert_to_numpy(model.predict(x, verbose=0)), atol=1e-6)
    assert loaded.count_params() == model.count_params()


def test_a_keras_file_of_the_previous_layout_loads(tmp_path):
    """The previous release recorded the models' class as `VisionTransformerModel` of the module
    `guard` at keras_vit's top (the layout before issue 45); such a file loads: Keras finds the
    class by its registered name, which did not change."""
    import json
    import zipfile

    model = randomize(keras_vit.VisionTransformer(**TINY, pooling="avg", input_shape=(32, 32, 3)))
    new, old = tmp_path / "new.keras", tmp_path / "old.keras"
    model.save(new)
    with zipfile.ZipFile(new) as source, zipfile.ZipFile(old, "w") as target:
        for item in source.infolist():
            data = source.read(item.filename)
            if item.filename == "config.json":
                config = json.loads(data)
                assert config["registered_name"] == "keras_vit>VisionTransformerModel"
                config["module"] = "keras_vit.guard"  # the previous layout (regroup45: keep)
                data = json.dumps(config).encode()
            target.writestr(item, data)
    loaded = keras.saving.load_model(old)
    x = np.random.default_rng(0).uniform(-1, 1, (2, 32, 32, 3)).astype("float32")
    assert type(loaded).__name__ == "VisionTransformerModel"
    np.testing.assert_allclose(keras.ops.convert_to_numpy(loaded.predict(x, verbose=0)),
                               keras.ops.convert_to_numpy(model.predict(x, verbose=0)), atol=1e-6)
