"""Saving: `.keras` round trips without custom_objects, and files move between backends."""

import json
import os
import subprocess
import sys

import keras
import numpy as np

import keras_vit
from tests.support import BACKEND
from tests.support.models import randomize

OTHER_BACKENDS = [b for b in ("tensorflow", "jax", "torch") if b != BACKEND]
ARCH = dict(patch_size=8, hidden_dim=32, depth=2, num_heads=4, mlp_dim=64, input_shape=(32, 32, 3))

LOAD_AND_PREDICT = """
import json, sys
import keras, numpy as np
import keras_vit  # registers the layers; no custom_objects needed
folder, arch = sys.argv[1], json.loads(sys.argv[2])
x = np.load(folder + "/images.npy")
model = keras.saving.load_model(folder + "/vit.keras")
np.save(folder + "/from_keras_file.npy", model.predict(x, verbose=0))
model = keras_vit.VisionTransformer(**arch)
model.load_weights(folder + "/vit.weights.h5")
np.save(folder + "/from_weights_file.npy", model.predict(x, verbose=0))
"""


def _model():
    return randomize(keras_vit.VisionTransformer(**ARCH, classes=6, classifier_activation=None, drop_path_rate=0.1))


def test_keras_file_round_trip_without_custom_objects(tmp_path, rng):
    model = _model()
    images = rng.uniform(-1, 1, (2, 32, 32, 3)).astype("float32")
    path = tmp_path / "vit.keras"
    model.save(path)
    restored = keras.saving.load_model(path)
    np.testing.assert_array_equal(restored.predict(images, verbose=0), model.predict(images, verbose=0))
    assert restored.get_layer("encoder").get_config() == model.get_layer("encoder").get_config()


def test_files_saved_here_load_and_predict_the_same_on_the_other_backends(tmp_path, rng):
    model = _model()
    images = rng.uniform(-1, 1, (2, 32, 32, 3)).astype("float32")
    np.save(tmp_path / "images.npy", images)
    model.save(tmp_path / "vit.keras")
    model.save_weights(tmp_path / "vit.weights.h5")
    expected = model.predict(images, verbose=0)
    arch = {**ARCH, "input_shape": list(ARCH["input_shape"]), "classes": 6, "classifier_activation": None}
    for backend in OTHER_BACKENDS:
        env = {**os.environ, "KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "3"}
        args = [sys.executable, "-c", LOAD_AND_PREDICT, str(tmp_path), json.dumps(arch)]
        proc = subprocess.run(args, env=env, capture_output=True, text=True)
        assert proc.returncode == 0, f"loading under {backend} failed:\n{proc.stderr[-3000:]}"
        for name in ("from_keras_file", "from_weights_file"):
            got = np.load(tmp_path / f"{name}.npy")
            np.testing.assert_allclose(got, expected, atol=1e-4, err_msg=f"{name}: {BACKEND} -> {backend}")
