"""`keras-vit export` of dense models (`keras_vit.DenseModel`: DPT depth, linear segmentation, EoMT):
each export, run in its own runtime, gives the Keras model's outputs (EoMT's two by name) at a
size and batch size it was neither traced nor checked at, and its card says what the outputs hold
and what the input must be. Each backend's run exports in its own process the formats it writes
(`PLAN`; the hand-over to another backend's process is tests/inference/test_export_formats.py's).
DPT's exports from PyTorch (ONNX, the PyTorch program) work but take over a minute to trace here:
not in the suite."""

import json

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.cli import main
from keras_vit.inference import serving
from tests.support import BACKEND
from tests.support.models import randomize

# (model, format) exported on each backend.
PLAN = {
    # EoMT as LiteRT: its SavedModel is the converter's input; the queries' concatenation once failed there
    "tensorflow": [("depth", "litert"), ("semantic", "openvino"), ("eomt", "litert")],
    "jax": [("semantic", "saved_model")],  # a DPT head goes to the TensorFlow process (`_jax_cannot_trace`)
    "torch": [("semantic", "onnx"), ("eomt", "torch")],
}
RUNTIMES = {"saved_model": "tensorflow", "onnx": "onnxruntime", "litert": "ai_edge_litert", "openvino": "openvino",
            "torch": "torch"}
HOLDS = {"depth": "a depth map", "semantic": "per-pixel class logits", "eomt": "EoMT's per-query outputs"}


def dense_model(kind):
    """A tiny dense model of any input size (patch 8), with random weights and BatchNorm statistics."""
    backbone = keras_vit.VisionTransformer(8, 16, 2, 2, 32, include_top=False, pooling=None, input_shape=(None, None, 3))
    if kind == "depth":  # the class token read out by projection
        model = keras_vit.DenseModel(backbone, "dpt", "depth", layers=[0, 0, 1, 1], neck_hidden_sizes=(8, 8, 16, 16),
                                     fusion_hidden_size=8, head_hidden_size=4, fusion_resize="next",
                                     head_upsample="input")
    elif kind == "semantic":
        model = keras_vit.DenseModel(backbone, "linear", "semantic", num_classes=3, layers=[0, 1], class_token=True)
    else:
        model = keras_vit.DenseModel(backbone, "eomt", num_classes=3, num_queries=4, num_blocks=1)
    randomize(model, scale=0.2 if kind == "depth" else 0.3)  # depth of order 1: the exports' tolerance is absolute
    for variable in model.weights:
        if variable.path.endswith("moving_variance"):
            variable.assign(np.abs(keras.ops.convert_to_numpy(variable)) + 0.5)
        if variable.path.endswith("head_conv3/bias"):  # depth through the ReLU at most pixels
            variable.assign(np.full(variable.shape, 0.5, "float32"))
    return model


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """kind -> its `.keras` file, written on first use."""
    folder, paths = tmp_path_factory.mktemp("dense"), {}

    def path(kind):
        if kind not in paths:
            paths[kind] = folder / f"{kind}.keras"
            dense_model(kind).save(paths[kind])
        return paths[kind]

    return path


def outputs_of(model, images):
    out = serving.keras_outputs(model, images)
    return out if isinstance(out, dict) else {"output": out}


@pytest.mark.parametrize("kind, fmt", PLAN[BACKEND])
def test_a_dense_export_matches_the_model_at_another_size(kind, fmt, saved, tmp_path, capsys):
    pytest.importorskip(RUNTIMES[fmt])
    out = str(tmp_path / f"{kind}{serving.SPECS[fmt].suffix}")
    assert main(["export", str(saved(kind)), "--format", fmt, "--output", out]) == 0
    assert "outputs match the Keras model within" in capsys.readouterr().out
    model = keras.saving.load_model(saved(kind))
    images = serving.sample_images(model, count=3, seed=2, shape=(40, 56, 3))  # neither traced nor checked
    expected = serving.keras_outputs(model, images)
    got = serving.run_exported(fmt, out, images, like=expected)
    pairs = [(got[k], expected[k]) for k in expected] if kind == "eomt" else [(got, expected)]
    for ours, theirs in pairs:
        assert ours.shape == theirs.shape and theirs.std() > 0.05, (ours.shape, theirs.shape, theirs.std())
        np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-4 * max(1.0, np.abs(theirs).max()), err_msg=fmt)
    if kind == "depth":
        assert expected.shape == (3, 40, 56) and (expected > 0).mean() > 0.5
    card = json.loads(open(out + ".serving.json").read())
    assert card["output"]["holds"].startswith(HOLDS[kind]) and card["input"]["multiple_of"] == 8
    assert card["input"]["dynamic"] == ["batch", "height", "width"]
    assert card["preprocessing"]["steps"][2] == "no crop: the whole image"
    if kind == "eomt":
        assert card["output"]["shapes"] == {"class_queries_logits": [None, 4, 4],
                                            "masks_queries_logits": [None, 4, None, None]}
    else:
        assert card["output"]["shape"] == ([None, None, None] if kind == "depth" else [None, None, None, 3])


@pytest.mark.backend_independent  # pairing of outputs, NumPy only
def test_several_outputs_are_paired_by_name_then_shape():
    like = {"class_queries_logits": np.zeros((1, 4, 4)), "masks_queries_logits": np.zeros((1, 4, 8, 8))}
    masks, classes = np.ones((1, 4, 8, 8)), np.ones((1, 4, 4))
    for given in ([masks, classes], {"Identity:0": masks, "Identity_1:0": classes},
                  {"serving_masks_queries_logits": masks, "serving_class_queries_logits": classes}):
        paired = serving.by_name(given, like)
        assert paired["class_queries_logits"] is not None and paired["class_queries_logits"].shape == (1, 4, 4)
        assert paired["masks_queries_logits"].shape == (1, 4, 8, 8)
