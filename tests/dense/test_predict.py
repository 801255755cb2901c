"""`keras-vit predict` of a dense model (a `.keras` DenseModel, a run folder, a transformers checkpoint
folder): one PNG per image at the image's own size, whose palette indices are the argmax of the
model's logits resized to that size (torch's `interpolate` as the reference), a normalised depth
PNG, EoMT through the semantic post-processing, the raw maps as .npz / .npy / JSON; bad input one
line, exit 2, nothing written."""

import json
import os

import keras
import numpy as np
import pytest
from PIL import Image

import keras_vit
from keras_vit.cli import main
from keras_vit.dense import post_process_semantic_segmentation
from keras_vit.dense.predict import input_size, palette
from keras_vit.run_folder import BEST
from tests.support.models import randomize

torch = pytest.importorskip("torch")
SIZES = ((45, 60), (30, 22))  # (height, width) of the two images


def tiny(kind):
    shape = (32, 32, 3) if kind == "eomt" else (None, None, 3)  # EoMT at its fixed size: any image resized to it
    backbone = keras_vit.VisionTransformer(8, 16, 2, 2, 32, include_top=False, pooling=None, input_shape=shape,
                                           preprocessing="dinov2")
    if kind == "semantic":
        model = keras_vit.DenseModel(backbone, "linear", "semantic", num_classes=5, layers=[0, 1])
    elif kind == "depth":
        model = keras_vit.DenseModel(backbone, "dpt", "depth", layers=[0, 0, 1, 1], neck_hidden_sizes=(8, 8, 16, 16),
                                     fusion_hidden_size=8, head_hidden_size=4, fusion_resize="next", head_upsample="input")
    else:
        model = keras_vit.DenseModel(backbone, "eomt", num_classes=4, num_queries=4, num_blocks=1)
    randomize(model, seed=1, scale=0.3)
    for variable in model.weights:
        if variable.path.endswith("moving_variance"):
            variable.assign(np.abs(keras.ops.convert_to_numpy(variable)) + 0.5)
        if variable.path.endswith("head_conv3/bias"):
            variable.assign(np.full(variable.shape, 0.5, "float32"))
    return model


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Two photos of different sizes, and the three models saved (the semantic one in a run folder)."""
    folder = tmp_path_factory.mktemp("dense_predict")
    rng = np.random.default_rng(0)
    photos = []
    for i, size in enumerate(SIZES):
        photos.append(str(folder / f"photo{i}.png"))
        Image.fromarray(rng.integers(0, 256, (*size, 3), dtype=np.uint8)).save(photos[-1])
    (folder / "run").mkdir()
    paths = {"semantic": folder / "run" / BEST, "depth": folder / "depth.keras", "eomt": folder / "eomt.keras"}
    for kind, path in paths.items():
        tiny(kind).save(path)
    return photos, {k: str(v) for k, v in paths.items()}


def model_input(model, photo):
    pixels = np.asarray(Image.open(photo).convert("RGB"))
    size = input_size(model, *pixels.shape[:2])
    resized = keras_vit.data.images.resize(pixels, size, "bicubic")  # the dinov2 preprocessing's interpolation
    return keras_vit.preprocess_input(resized[None], preprocessing=model), pixels.shape[:2], size


def resized(maps_nchw, size):
    """torch's bilinear `interpolate` (align_corners=False), float64."""
    tensor = torch.from_numpy(np.asarray(maps_nchw, np.float64))
    return torch.nn.functional.interpolate(tensor, size=size, mode="bilinear", align_corners=False).numpy()


def test_segmentation_pngs_are_the_argmax_of_the_resized_logits(files, tmp_path, capsys):
    photos, paths = files
    out = tmp_path / "maps"
    assert main(["predict", *photos, "--model", os.path.dirname(paths["semantic"]), "--out-dir", str(out)]) == 0
    model = keras.saving.load_model(paths["semantic"])
    assert input_size(model, 45, 60) == (224, 296)  # shorter side to the 28 x 28 grid's 224 px, multiples of 8
    for photo, (height, width) in zip(photos, SIZES):
        png = Image.open(out / (os.path.basename(photo)))
        assert png.mode == "P" and png.size == (width, height)
        assert png.getpalette()[:9] == [0, 0, 0, 128, 0, 0, 0, 128, 0]  # class 0 first: black, red, green
        x, size, _ = model_input(model, photo)
        logits = model.predict(x, verbose=0)
        expected = np.argmax(resized(logits.transpose(0, 3, 1, 2), size)[0], axis=0)
        assert len(np.unique(expected)) >= 3  # a map worth comparing
        np.testing.assert_array_equal(np.asarray(png), expected)
    assert f"{photos[0]} -> {out / 'photo0.png'}" in capsys.readouterr().out


def test_depth_png_is_the_normalised_resized_depth(files, tmp_path):
    photos, paths = files
    out = tmp_path / "depth"
    for bits in (16, 8):
        assert main(["predict", photos[0], "--model", paths["depth"], "--out-dir", str(out), "--bits", str(bits)]) == 0
        got = np.asarray(Image.open(out / "photo0.png")).astype(np.float64)
        model = keras.saving.load_model(paths["depth"])
        x, size, _ = model_input(model, photos[0])
        depth = resized(model.predict(x, verbose=0)[:, None], size)[0, 0]
        assert got.shape == SIZES[0] and got.max() == 2**bits - 1 and got.min() == 0
        np.testing.assert_allclose(got, (depth - depth.min()) / np.ptp(depth) * (2**bits - 1), atol=0.51 + 1e-3 * 2**bits)


def test_eomt_goes_through_the_semantic_post_processing_and_raw_maps(files, tmp_path, capsys):
    photos, paths = files
    model = keras.saving.load_model(paths["eomt"])
    expected = []
    for photo in photos:
        x, size, model_size = model_input(model, photo)
        expected.append(post_process_semantic_segmentation(model.predict(x, verbose=0), [size], size=model_size)[0])
    assert main(["predict", *photos, "--model", paths["eomt"], "--out-dir", str(tmp_path / "png")]) == 0
    for photo, want in zip(photos, expected):
        np.testing.assert_array_equal(np.asarray(Image.open(tmp_path / "png" / os.path.basename(photo))), want)
    assert main(["predict", *photos, "--model", paths["eomt"], "--output", str(tmp_path / "maps.npz")]) == 0
    with np.load(tmp_path / "maps.npz") as saved:
        for photo, want in zip(photos, expected):
            np.testing.assert_array_equal(saved[photo], want)
    capsys.readouterr()
    assert main(["predict", photos[1], "--model", paths["eomt"], "--json"]) == 0
    line = json.loads(capsys.readouterr().out)
    assert line["task"] == "eomt" and line["size"] == list(SIZES[1])
    np.testing.assert_array_equal(line["classes"], expected[1])
    assert main(["predict", photos[1], photos[1], "--model", paths["eomt"], "--output", str(tmp_path / "m.npy")]) == 0
    np.testing.assert_array_equal(np.load(tmp_path / "m.npy"), np.stack([expected[1]] * 2))


def test_a_depth_anything_checkpoint_folder_predicts(files, tmp_path):
    transformers = pytest.importorskip("transformers")
    from tests.support.dense import depth_anything, randomize_dense

    photos, _ = files
    randomize_dense(depth_anything(transformers)).save_pretrained(tmp_path / "da")
    assert main(["predict", photos[1], "--model", str(tmp_path / "da"), "--out-dir", str(tmp_path / "out")]) == 0
    png = np.asarray(Image.open(tmp_path / "out" / "photo1.png"))
    assert png.dtype == np.uint16 and png.shape == SIZES[1] and png.max() == 65535


@pytest.mark.parametrize("problem", ["unreadable", "missing", "suffix", "sizes"])
def test_bad_input_is_one_line_exit_2_nothing_written(problem, files, tmp_path, capsys):
    photos, paths = files
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"not a png")
    images = {"unreadable": [photos[0], str(bad)], "missing": [photos[0], str(tmp_path / "none.png")]}.get(problem, photos)
    extra = {"suffix": ["--output", str(tmp_path / "maps.txt")], "sizes": ["--output", str(tmp_path / "maps.npy")]}
    argv = ["predict", *images, "--model", paths["eomt"], "--out-dir", str(tmp_path / "out"), *extra.get(problem, [])]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("keras-vit predict: error: "), err
    assert sorted(os.listdir(tmp_path)) == ["bad.png"]


@pytest.mark.backend_independent  # NumPy
def test_the_palette_is_fixed_and_distinct():
    colours = palette()
    assert colours.shape == (256, 3) and colours[0].tolist() == [0, 0, 0] and len({tuple(c) for c in colours}) == 256
