"""`keras-vit export` of a NaFlex model (SigLIP 2, `naflex=True`): every serving format takes the
`{patches, spatial_shapes, mask}` input and, run in its own runtime, gives the Keras model's outputs
at batch sizes and patch budgets it was not traced at, images filling fewer patches than the budget
among them. Each backend's run exports the formats it writes in its own process (`writers`); what
it would hand to another backend's process (the same `.keras` file, the same writer) that
backend's run exports, and tests/inference/test_export_formats.py checks the hand-over."""

import importlib.util

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.cli import main
from keras_vit.inference import serving
from tests.support import BACKEND
from tests.support.models import randomize

RUNTIMES = ("tensorflow", "onnxruntime", "onnxscript", "ai_edge_litert", "openvino", "torch")
WRITTEN_HERE = [fmt for fmt in serving.FORMATS if BACKEND in serving.SPECS[fmt].writers]


@pytest.fixture(scope="module")
def naflex_model(tmp_path_factory):
    model = keras_vit.VisionTransformer(patch_size=4, hidden_dim=16, depth=1, num_heads=2, mlp_dim=32,
                                        class_token=False, pooling="map", naflex=True, input_shape=(16, 16, 3),
                                        classes=3, classifier_activation=None)
    path = tmp_path_factory.mktemp("naflex") / "naflex.keras"
    randomize(model, seed=3).save(path)
    return path


def test_every_serving_format_takes_naflex_inputs(naflex_model, tmp_path, capsys):
    missing = [name for name in RUNTIMES if importlib.util.find_spec(name) is None]
    if missing:
        pytest.skip(f"not installed: {', '.join(missing)}")
    out = str(tmp_path / "naflex")
    assert main(["export", str(naflex_model), "--format", ",".join(WRITTEN_HERE), "--output", out, "--atol", "1e-5"]) == 0
    assert capsys.readouterr().out.count("outputs match the Keras model within") == len(WRITTEN_HERE)
    model = keras.saving.load_model(naflex_model)
    for count, budget in ((5, 30), (1, 7)):  # neither batch size nor budget traced or checked at export
        inputs = serving.naflex_sample(model, count=count, seed=1, budget=budget)
        assert (inputs["mask"].sum(1) < budget).any()
        expected = serving.keras_outputs(model, inputs)
        assert expected.shape == (count, 3) and np.abs(expected).max() > 0.1
        for fmt in WRITTEN_HERE:
            path = out + (serving.SPECS[fmt].suffix if len(WRITTEN_HERE) > 1 else "")  # as `export` names them
            got = serving.run_exported(fmt, path, inputs)
            np.testing.assert_allclose(got, expected, atol=1e-5, rtol=0, err_msg=fmt)
