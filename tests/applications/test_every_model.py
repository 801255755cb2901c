"""One harness over every named builder (`keras_vit.list_models()`), each at a tiny width and
depth with its own patch size, tokens, head and options: build and call at two input sizes,
`get_config` round trip, `.keras` save / load here (and, of each family's first builder and the
hybrid, on another backend: loading runs the same layer code at every size), `features`, and
the export at two sizes (of the builders that between them hold every kind of token, block and
head: the export path depends on the layers, not on the widths).

The first builder of each family (builders with the same options, differing only in their five
numbers and input size) runs under every backend; the family's other sizes and the hybrid each
under one, in turn, so that the suite's three runs check every builder and every backend every
family."""

import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.variants import ARCHITECTURE_KEYS, VARIANTS
from keras_vit.weights.registry import architecture
from tests.support import BACKEND, this_backends_share
from tests.support.models import randomize


def _options(name):
    """What tells `name`'s family apart: its options; None for the hybrid, whose stem
    tests/applications/test_hybrid.py checks under every backend at small stages (its 50 ResNet
    layers here were a third of this file's time)."""
    options = {k: v for k, v in architecture(name).items() if k not in (*ARCHITECTURE_KEYS, "input_size", "projection_dim")}
    return repr(sorted(options.items())) if options or name in VARIANTS else None


ALL_MODELS = keras_vit.list_models()
FIRST_OF_EACH_FAMILY = tuple(name for key, name in {_options(n): n for n in reversed(ALL_MODELS)}.items() if key)
MODELS = this_backends_share(ALL_MODELS, everywhere=FIRST_OF_EACH_FAMILY)
TINY = dict(hidden_dim=16, depth=1, num_heads=2, mlp_dim=32, weights=None)
# Builders that between them hold every kind of token, block and head: class + distillation
# tokens with two heads, registers + LayerScale + SwiGLU, no class token + MAP head.
EXPORTED = ("DeiTTi16", "DINOv2G14", "SigLIPB16")
# The backend that loads the files saved here: over the suite's three runs, every backend
# loads another's files (TensorFlow's on JAX, JAX's on PyTorch, PyTorch's on TensorFlow).
NEXT_BACKEND = {"tensorflow": "jax", "jax": "torch", "torch": "tensorflow"}[BACKEND]
LOAD_AND_PREDICT = """
import json, sys
import keras, numpy as np
import keras_vit  # registers the layers; no custom_objects needed
folder, names = sys.argv[1], json.loads(sys.argv[2])
for name in names:
    model = keras.saving.load_model(f"{folder}/{name}.keras")
    for i in range(2):
        np.save(f"{folder}/{name}-{i}-loaded.npy", keras.ops.convert_to_numpy(model(np.load(f"{folder}/{name}-{i}.npy"))))
"""


def tiny(name):
    """The builder `name` at a tiny size, any input size, random weights (no trivial ones)."""
    builder = getattr(keras_vit, name)
    model = builder(input_shape=(None, None, 3), classes=3, classifier_activation=None, seed=0, **TINY)
    return randomize(model, seed=len(name))


def step(model):
    stem = next((layer for layer in model.layers if layer.name == "stem"), None)
    return model.get_layer("embedding").patch_size * (stem.stride if stem is not None else 1)


def images(model, rng):
    """A square and a non-square batch at sizes the model's patches divide."""
    s = step(model)
    return [rng.uniform(-1, 1, (2, 2 * s, 2 * s, 3)).astype("float32"),
            rng.uniform(-1, 1, (1, 3 * s, 2 * s, 3)).astype("float32")]


def numpy(x):
    return keras.ops.convert_to_numpy(x)


@pytest.fixture(scope="module")
def built():
    rng = np.random.default_rng(0)
    out = {}
    for name in MODELS:
        model = tiny(name)
        out[name] = model, images(model, rng)
    return out


@pytest.mark.parametrize("name", MODELS)
def test_builds_and_runs_at_two_sizes(built, name):
    model, batches = built[name]
    for x in batches:
        y = numpy(model(x))
        assert y.shape[0] == len(x) and np.isfinite(y).all()
        np.testing.assert_allclose(numpy(model(x[:1])), y[:1], rtol=1e-4, atol=1e-5)  # batch size free


@pytest.mark.parametrize("name", MODELS)
def test_config_round_trip_gives_the_same_model(built, name):
    model, batches = built[name]
    clone = type(model).from_config(model.get_config())
    clone.set_weights(model.get_weights())
    assert clone.get_config() == model.get_config()
    for x in batches:
        np.testing.assert_allclose(numpy(clone(x)), numpy(model(x)), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", MODELS)
def test_features_are_the_encoder_tokens(built, name):
    model, batches = built[name]
    x = batches[1]
    grid = keras_vit.features(model, x, layers=-1, norm=True, grid=True)
    s = step(model)
    assert grid.shape == (1, x.shape[1] // s, x.shape[2] // s, TINY["hidden_dim"])


def test_keras_files_load_here_and_on_another_backend(built, tmp_path):
    for name, (model, batches) in built.items():
        model.save(tmp_path / f"{name}.keras")
        restored = keras.saving.load_model(tmp_path / f"{name}.keras")
        for i, x in enumerate(batches):
            np.save(tmp_path / f"{name}-{i}.npy", x)
            np.testing.assert_array_equal(numpy(restored(x)), numpy(model(x)), err_msg=name)
    elsewhere = [name for name in built if name in FIRST_OF_EACH_FAMILY or not _options(name)]  # and the hybrid
    env = {**os.environ, "KERAS_BACKEND": NEXT_BACKEND, "TF_CPP_MIN_LOG_LEVEL": "3"}
    command = [sys.executable, "-c", LOAD_AND_PREDICT, str(tmp_path), json.dumps(elsewhere)]
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"loading under {NEXT_BACKEND} failed:\n{proc.stderr[-3000:]}"
    for name in elsewhere:
        model, batches = built[name]
        for i, x in enumerate(batches):
            got = np.load(tmp_path / f"{name}-{i}-loaded.npy")
            # atol 1e-4: the hybrid's 50 ResNet layers add up float32 rounding another way per backend.
            np.testing.assert_allclose(got, numpy(model(x)), rtol=1e-4, atol=1e-4,
                                       err_msg=f"{name}: {BACKEND} -> {NEXT_BACKEND}")


@pytest.mark.parametrize("name", EXPORTED)
def test_export_at_two_sizes(built, name, tmp_path):
    from keras_vit.inference import serving

    model, _ = built[name]
    fmt = "onnx" if BACKEND == "torch" else "saved_model"
    assert len(serving.input_shapes(model)) == 2  # the export is checked at two sizes
    error = serving.export(model, fmt, str(tmp_path / f"{name}.{fmt}"))
    assert error <= 1e-4
