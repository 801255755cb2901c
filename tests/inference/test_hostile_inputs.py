"""Hostile inputs to `predict` and `features` (issue 22): small files that asked for gigabytes,
all images decoded before the model ran, damaged `.keras` files and bad arguments giving
tracebacks."""

import importlib
import json
import subprocess
import sys
import textwrap
import zipfile

import numpy as np
import pytest
from PIL import Image

import keras_vit
from tests.support.commands import fails
from tests.support.checkpoints import TINY

# The module, not the function `keras_vit.inference.predict` that the package exports.
inference = importlib.import_module("keras_vit.inference.predict")

GIB = 2**30


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("model") / "tiny.keras"
    keras_vit.VisionTransformer(**TINY, classes=5, input_shape=(32, 32, 3)).save(path)
    return path


def png(path, width, height, seed=0):
    pixels = np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(path)
    return path


# ------------------------------------------------------------------ 5: extreme aspect ratios


@pytest.mark.backend_independent  # NumPy image code
def test_centre_crop_work_follows_the_output(tmp_path):
    """A 3000 x 1 PNG made the 224-pixel centre crop allocate several 7.5 GiB arrays; a 99:1
    one (accepted) built a (22176, 4950) resize matrix. Run under a 1 GiB address-space limit."""
    thin, wide = png(tmp_path / "thin.png", 3000, 1), png(tmp_path / "wide.png", 4950, 50)
    script = textwrap.dedent(f"""
        import resource, sys
        sys.argv = ["keras-vit"]  # keras_vit then imports no Keras: the image code is NumPy only
        resource.setrlimit(resource.RLIMIT_AS, ({GIB}, {GIB}))
        from keras_vit.data import images
        try:
            images.center_crop(images.read_image({str(thin)!r}), 224, 0.875)
        except ValueError as error:
            print("refused:", error)
        print("shape", *images.center_crop(images.read_image({str(wide)!r}), 224, 0.875).shape)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "refused: a 3000x1 image: its sides differ more than 100 times" in done.stdout
    assert "shape 224 224 3" in done.stdout


def test_predict_refuses_an_extreme_aspect_ratio_in_one_line(model_file, tmp_path, capsys):
    thin = png(tmp_path / "thin.png", 300, 2)
    fails(["predict", thin, "--model", model_file], capsys, f"{thin}: a 300x2 image: its sides differ more than 100 times")


@pytest.mark.backend_independent  # NumPy image code
def test_centre_crop_of_a_long_image_equals_the_full_resize_cropped(rng):
    from keras_vit.data import images

    image = rng.integers(0, 256, (7, 640, 3), dtype=np.uint8)
    crop = images.center_crop(image, 16, 0.875)
    scaled = np.maximum(np.round(np.float32(16 / 0.875) / 7 * np.float32([7, 640])).astype(int), 16)
    full = images.resize(image, tuple(scaled))
    top, left = (scaled - 16) // 2
    # the window's sample positions are float32 sums as TensorFlow's shifted resize makes them
    # ((x + 0.5) / scale + left / scale): up to ~5e-3 of a level from the full resize's
    np.testing.assert_allclose(crop, full[top : top + 16, left : left + 16], rtol=0, atol=1e-2)


# ------------------------------------------------------------------ 8: streaming


@pytest.mark.backend_independent  # NumPy batching
def test_predict_decodes_one_batch_at_a_time(model_file, tmp_path, monkeypatch):
    paths = [str(png(tmp_path / f"{i}.png", 40, 36, seed=i)) for i in range(5)] * 14  # 70 images
    model, _, _ = inference.load_model(str(model_file))
    whole = inference.predict(model, paths, batch_size=len(paths))
    decoded, seen = [0], []
    read_image, run = inference.images.read_image, model.predict

    def counting_read(path):
        decoded[0] += 1
        return read_image(path)

    def recording_predict(batch, **kwargs):
        seen.append((decoded[0], len(batch)))
        decoded[0] = 0
        return run(batch, **kwargs)

    monkeypatch.setattr(inference.images, "read_image", counting_read)
    monkeypatch.setattr(model, "predict", recording_predict)
    streamed = inference.predict(model, paths)
    assert seen == [(32, 32), (32, 32), (6, 6)]
    assert [[i for i, _, _ in row] for row in streamed] == [[i for i, _, _ in row] for row in whole]
    np.testing.assert_allclose([[p for _, _, p in row] for row in streamed], [[p for _, _, p in row] for row in whole], atol=1e-5)


# ------------------------------------------------------------------ 10: damaged .keras files


def test_keras_file_with_a_bad_crc_is_refused_by_predict(model_file, tmp_path, capsys):
    data = bytearray(model_file.read_bytes())
    start = data.index(b'"class_name"')
    data[start + 1] ^= 0x20  # config.json no longer matches its CRC-32
    (tmp_path / "bad.keras").write_bytes(bytes(data))
    image = png(tmp_path / "a.png", 32, 32)
    fails(["predict", image, "--model", tmp_path / "bad.keras"], capsys, "bad.keras: cannot load it as a Keras model")


def test_keras_file_naming_an_unknown_class_is_refused_by_predict(model_file, tmp_path, capsys):
    with zipfile.ZipFile(model_file) as src, zipfile.ZipFile(tmp_path / "odd.keras", "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.filename == "config.json":
                config = json.loads(data)
                config.update(module="no_such_package", class_name="NoSuchModel", registered_name="NoSuchModel")
                data = json.dumps(config)
            dst.writestr(info.filename, data)
    image = png(tmp_path / "a.png", 32, 32)
    fails(["predict", image, "--model", tmp_path / "odd.keras"], capsys, "odd.keras: cannot load it as a Keras model")


# ------------------------------------------------------------------ 11: features


@pytest.mark.parametrize("batch_size", [0, -1, 2.5, True, "8"])
def test_features_refuses_a_bad_batch_size(batch_size):
    model = keras_vit.VisionTransformer(**TINY, include_top=False, input_shape=(32, 32, 3))
    with pytest.raises(ValueError, match=r"batch_size=.*expected a whole number >= 1") as info:
        keras_vit.features(model, np.zeros((2, 32, 32, 3), np.float32), batch_size=batch_size)
    assert "\n" not in str(info.value)


def test_features_refuses_an_empty_batch():
    model = keras_vit.VisionTransformer(**TINY, include_top=False, input_shape=(32, 32, 3))
    with pytest.raises(ValueError, match="empty batch"):
        keras_vit.features(model, np.zeros((0, 32, 32, 3), np.float32))
