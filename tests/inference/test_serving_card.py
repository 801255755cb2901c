"""`NAME.serving.json` beside every export: fed as its card says, with plain NumPy and Pillow,
the export gives what `keras-vit predict` gives; the card never replaces a user's file; a
PyTorch program always ends in `.pt2`."""

import json
import os

import numpy as np
import pytest
from PIL import Image

import keras_vit
from keras_vit.cli import main
from keras_vit.inference import serving
from keras_vit.inference.predict import predict
from keras_vit.run_folder import CLASSES, load_keras_file
from tests.support.models import randomize

NAMES = ["ant", "bee", "cat", "dog", "eel"]


@pytest.fixture(scope="module")
def run_model(tmp_path_factory):
    """A tiny randomised classifier saved as a run saves it: with its classes and evaluation crop."""
    folder = tmp_path_factory.mktemp("run")
    model = keras_vit.VisionTransformer(patch_size=8, hidden_dim=16, depth=1, num_heads=2, mlp_dim=32,
                                        input_shape=(32, 32, 3), classes=5, preprocessing="deit")
    randomize(model, scale=0.5)
    model.save(folder / "best.keras")
    (folder / CLASSES).write_text(json.dumps({"class_names": NAMES, "image_size": 32, "eval_crop": 0.8}))
    return folder / "best.keras"


@pytest.fixture
def photo(tmp_path):
    pixels = np.random.default_rng(3).integers(0, 256, (45, 60, 3), dtype=np.uint8)
    path = tmp_path / "photo.png"
    Image.fromarray(pixels).save(path)
    return path


def as_the_card_says(path, card):
    """The card's preprocessing in Pillow and NumPy alone, as a serving stack without keras_vit does it."""
    steps = card["preprocessing"]
    size, short = steps["image_size"], round(steps["image_size"] / steps["crop_fraction"])
    image = Image.open(path).convert("RGB")
    scale = short / min(image.size)
    width, height = max(size, round(image.width * scale)), max(size, round(image.height * scale))
    resample = {"bicubic": Image.BICUBIC, "bilinear": Image.BILINEAR}[steps["interpolation"]]
    image = image.resize((width, height), resample)
    left, top = (width - size) // 2, (height - size) // 2
    pixels = np.asarray(image.crop((left, top, left + size, top + size)), np.float32)
    return ((pixels / 255 - np.float32(steps["mean"])) / np.float32(steps["std"]))[None].astype(np.float32)


def test_fed_as_its_card_says_the_onnx_export_gives_what_predict_gives(run_model, photo, tmp_path, capsys):
    pytest.importorskip("onnxruntime")
    out = str(tmp_path / "vit.onnx")
    assert main(["export", str(run_model), "--format", "onnx", "--output", out]) == 0
    assert f"how to call it: {out}.serving.json" in capsys.readouterr().out
    card = json.loads(open(out + ".serving.json").read())
    assert card["format"] == "onnx" and card["file"] == "vit.onnx" and card["class_names"] == NAMES
    assert card["input"]["shape"] == [None, 32, 32, 3] and card["input"]["layout"].startswith("NHWC")
    assert card["output"]["holds"].startswith("probabilities")
    assert card["preprocessing"]["crop_fraction"] == 0.8 and card["preprocessing"]["interpolation"] == "bicubic"
    np.testing.assert_allclose(card["preprocessing"]["mean"], (0.485, 0.456, 0.406))
    import onnxruntime

    session = onnxruntime.InferenceSession(out, providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == [card["input"]["name"]]
    served = session.run(None, {card["input"]["name"]: as_the_card_says(photo, card)})[0][0]
    top = predict(load_keras_file(str(run_model)), [str(photo)], top=5, crop_fraction=0.8)[0]
    expected = {index: prob for index, _, prob in top}
    np.testing.assert_allclose(served, [expected[i] for i in range(5)], atol=0.02)  # Pillow's resize, not keras_vit's
    assert int(np.argmax(served)) == max(expected, key=expected.get)
    assert oct(os.stat(out + ".serving.json").st_mode & 0o777) == oct(0o666 & ~_umask())


def _umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_a_pytorch_program_ends_in_pt2(run_model, tmp_path, capsys):
    pytest.importorskip("torch")
    assert main(["export", str(run_model), "--format", "torch", "--output", str(tmp_path / "vit"), "--no-verify"]) == 0
    assert sorted(os.listdir(tmp_path)) == ["vit.pt2", "vit.pt2.serving.json"]
    assert serving.output_path("torch", "vit.pt2") == "vit.pt2" and serving.output_path("onnx", "vit") == "vit"


# The card is checked and written by this process on every backend; under JAX and TensorFlow the
# ONNX file itself is a PyTorch process's (tests/inference/test_export_formats.py).
@pytest.mark.backends("torch")
def test_the_card_never_replaces_a_users_file(run_model, tmp_path, capsys):
    pytest.importorskip("onnxruntime")
    out = tmp_path / "vit.onnx"
    mine = tmp_path / "vit.onnx.serving.json"
    mine.write_text("my notes")
    assert main(["export", str(run_model), "--format", "onnx", "--output", str(out), "--no-verify"]) == 2
    assert "already exists" in capsys.readouterr().err
    assert mine.read_text() == "my notes" and sorted(os.listdir(tmp_path)) == ["vit.onnx.serving.json"]
    mine.unlink()
    assert main(["export", str(run_model), "--format", "onnx", "--output", str(out), "--no-verify"]) == 0
    assert main(["export", str(run_model), "--format", "onnx", "--output", str(out), "--no-verify"]) == 0  # its own card
    assert sorted(os.listdir(tmp_path)) == ["vit.onnx", "vit.onnx.serving.json"]
