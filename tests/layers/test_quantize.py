"""`model.quantize` covers the encoder's `Linear` projections; quantized models save, load and run."""

import numpy as np
import pytest

import keras
import keras_vit
from keras_vit.layers.linear import Linear
from tests.support.models import randomize

# Largest |logit error| / max |logit| of the tiny random model below, per mode.
TOLERANCE = {"int8": 0.05, "float8": 0.15, "int4": 0.4}


@pytest.fixture(scope="module")
def float_model():
    model = keras_vit.VisionTransformer(
        patch_size=4, hidden_dim=32, depth=1, num_heads=2, mlp_dim=64, input_shape=(16, 16, 3), classes=10,
        classifier_activation=None,
    )
    return randomize(model, scale=0.1)


def logits(model, images):
    return keras.ops.convert_to_numpy(model(images, training=False))


@pytest.mark.parametrize("mode", ["int8", "float8", "int4"])
def test_quantize_covers_every_linear_and_survives_saving(float_model, mode, tmp_path):
    images = np.random.default_rng(0).uniform(-1, 1, (4, 16, 16, 3)).astype("float32")
    model = keras.models.clone_model(float_model)
    model.set_weights(float_model.get_weights())
    model.quantize(mode)
    linears = [layer for layer in model._flatten_layers() if isinstance(layer, Linear)]
    assert len(linears) == 4 and {layer.quantization_mode for layer in linears} == {mode}
    if mode != "float8":  # float8 keeps a float kernel (its scales quantize the matmul's inputs)
        assert all(layer._kernel.dtype == "int8" for layer in linears)
    reference, quantized = logits(float_model, images), logits(model, images)
    error = np.abs(quantized - reference).max() / np.abs(reference).max()
    assert 0 < error < TOLERANCE[mode]
    path = tmp_path / f"{mode}.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert {layer.quantization_mode for layer in loaded._flatten_layers() if isinstance(layer, Linear)} == {mode}
    np.testing.assert_array_equal(logits(loaded, images), quantized)


def test_export_quantize_int8(float_model, tmp_path, capsys):
    from keras_vit.cli import main
    from keras_vit.inference import serving as export_lib

    fmt = "onnx" if keras.backend.backend() == "torch" else "saved_model"
    path, output = tmp_path / "float.keras", str(tmp_path / "int8")
    float_model.save(path)
    assert main(["export", str(path), "--format", fmt, "--output", output, "--quantize", "int8"]) == 0
    assert f"quantized to int8 as {fmt}" in capsys.readouterr().out
    images = export_lib.sample_images(float_model)
    exported = export_lib.run_exported(fmt, output, images)
    from keras_vit.inference.quantization import quantized_copy

    np.testing.assert_allclose(exported, logits(quantized_copy(float_model, "int8"), images), atol=1e-4)
    assert np.abs(exported - logits(float_model, images)).max() > 1e-4  # not the float model
    with pytest.raises(SystemExit) as exit_info:
        main(["export", str(path), "--output", output, "--quantize", "int2"])
    assert exit_info.value.code == 2 and "invalid choice: 'int2'" in capsys.readouterr().err
