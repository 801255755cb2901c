"""The README's Quick start, run as written in a fresh process and offline: its two downloads are put
where they are picked up (the ViT-B/16 ImageNet weights' file at keras_vit's cache path, in the AugReg
file's own layout with random weights; a generated photo in Keras' download cache), and it prints the
three likeliest ImageNet classes with their probabilities."""

import ast
import os
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

import keras_vit
from keras_vit.weights import export, registry
from tests.support.docs import REPO, blocks

pytestmark = pytest.mark.backend_independent  # the same code on every backend: its numbers are checked elsewhere


def quick_start():
    """The Python block of the README's Quick start (`demo.py`)."""
    return next(code for _, code in blocks(REPO / "README.md", "python") if code.startswith("# demo.py"))


def test_the_readme_quick_start_prints_three_imagenet_classes(tmp_path):
    code = quick_start()
    assert "keras_vit.ViTB16()" in code  # the default weights: the published ImageNet classifier
    home = tmp_path / "home"
    env = {**os.environ, "HOME": str(home), "KERAS_HOME": str(home / ".keras"),
           "KERAS_VIT_HOME": str(home / ".keras" / "keras_vit"), "PYTHONPATH": str(REPO)}
    os.environ["KERAS_VIT_HOME"], saved = env["KERAS_VIT_HOME"], os.environ.get("KERAS_VIT_HOME")
    try:
        weights = registry.cache_path(registry.find("imagenet", "ViTB16"))
    finally:
        os.environ.pop("KERAS_VIT_HOME") if saved is None else os.environ.update(KERAS_VIT_HOME=saved)
    os.makedirs(os.path.dirname(weights))
    model = keras_vit.ViTB16(weights=None, classifier_activation=None)
    rng = np.random.default_rng(0)
    model.get_layer("head").set_weights([rng.normal(0, 0.05, w.shape).astype("float32")
                                         for w in model.get_layer("head").get_weights()])
    export(model, weights, "npz")
    photo = home / ".keras" / "datasets" / "grace_hopper.jpg"
    photo.parent.mkdir(parents=True)
    Image.fromarray(rng.integers(0, 256, (300, 260, 3)).astype("uint8")).save(photo)
    (tmp_path / "demo.py").write_text(code)
    run = subprocess.run([sys.executable, "demo.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    printed = ast.literal_eval(run.stdout.strip().splitlines()[-1])  # [[(wordnet id, name, probability), ...]]
    assert len(printed) == 1 and len(printed[0]) == 3, printed
    probabilities = [p for _, _, p in printed[0]]
    assert all(isinstance(name, str) and name for _, name, _ in printed[0])
    assert probabilities == sorted(probabilities, reverse=True) and 0 < sum(probabilities) <= 1 + 1e-6
    assert probabilities[0] > 0.005, printed  # the file's head, not an untrained zero head's uniform 0.001
