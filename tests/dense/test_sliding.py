"""Sliding-window evaluation of dense models (`keras_vit.dense.sliding`, `evaluate --sliding-window`):
the tiling and averaging against NumPy written here, whole image = sliding window where the image is
the window, the recipe's `eval_window`, and the command line's refusals."""

import json
import os

import keras
import numpy as np
import pytest
from PIL import Image

import keras_vit
from keras_vit.cli import main
from keras_vit.data.images import resize
from keras_vit.dense.labels import IGNORE
from keras_vit.dense.scores import confusion_matrix, depth_errors, mean_depth_errors, segmentation_scores
from keras_vit.dense.sliding import slide, window_starts
from keras_vit.evaluation.dense import evaluate_dense
from tests.support.commands import fails
from tests.support.dense_data import shape_sample

WINDOW = 16


def reference_slide(predict, image, window, stride):
    """Per pixel: the mean of the outputs of every window over it, the windows' corners at the multiples
    of `stride` that fit and flush with the far edges."""
    height, width = image.shape[:2]
    rows, cols = ({*range(0, side - window + 1, stride), side - window} for side in (height, width))
    outputs = {(y, x): predict(image[None, y:y + window, x:x + window])[0] for y in rows for x in cols}
    result = np.zeros((height, width) + next(iter(outputs.values())).shape[2:], np.float64)
    for i in range(height):
        for j in range(width):
            over = [out[i - y, j - x] for (y, x), out in outputs.items() if y <= i < y + window and x <= j < x + window]
            result[i, j] = np.mean(over, axis=0)
    return result


@pytest.mark.backend_independent  # NumPy only
@pytest.mark.parametrize("shape, stride", [((16, 37), 10), ((23, 16), 5), ((16, 16), 7), ((40, 29), 16)])
def test_tiling_and_averaging_match_numpy(shape, stride):
    rng = np.random.default_rng(0)
    weights, where = rng.normal(size=(3, 5)), rng.normal(size=(WINDOW, WINDOW, 5))

    def predict(crops):  # a linear map of each pixel plus a bias that depends on its place in the window
        return crops @ weights + where

    image = rng.normal(size=(*shape, 3))
    np.testing.assert_allclose(slide(predict, image, WINDOW, stride, batch_size=3),
                               reference_slide(predict, image, WINDOW, stride), rtol=1e-5, atol=1e-5)
    assert window_starts(37, 16, 10) == [0, 10, 20, 21]


SIZES = [(16, 16), (16, 37), (30, 22), (16, 16)]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """`val/`: images of the window's size, of one side the window's, larger both ways; masks and depth
    (`train/`: one pair, unused)."""
    root = str(tmp_path_factory.mktemp("sliding"))
    rng = np.random.default_rng(1)
    for split, sizes in (("train", SIZES[:1]), ("val", SIZES)):
        for name in ("images", "masks", "depth"):
            os.makedirs(os.path.join(root, split, name))
        for i, (h, w) in enumerate(sizes):
            image, mask = shape_sample(rng, 40)
            image, mask = image[:h, :w], mask[:h, :w].copy()
            mask[0, :3] = IGNORE
            Image.fromarray(image).save(os.path.join(root, split, "images", f"{i}.png"))
            Image.fromarray(mask).save(os.path.join(root, split, "masks", f"{i}.png"))
            np.save(os.path.join(root, split, "depth", f"{i}.npy"), (1.0 + mask % 7).astype(np.float32))
    return root


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """`{task: (model, path)}`: tiny linear-head models of 16 px images."""
    folder = tmp_path_factory.mktemp("models")
    keras.utils.set_random_seed(2)
    backbone = keras_vit.VisionTransformer(4, 16, 1, 2, 32, include_top=False, input_shape=(WINDOW, WINDOW, 3))
    found = {}
    for task in ("semantic", "depth"):
        model = keras_vit.DenseModel(backbone, head="linear", task=task, num_classes=4 if task == "semantic" else None)
        if task == "depth":
            model.get_layer("linear_head").conv.bias.assign([2.0])
        found[task] = (model, str(folder / f"{task}.keras"))
        model.save(found[task][1])
    return found


def numpy_scores(model, root, task, stride):
    """The scores of `model` on the pairs of `root/val`, windows and resizing done here in NumPy."""
    def predict(crops):
        return np.asarray(model.predict_on_batch(crops.astype(np.float32)), np.float64)

    confusion, errors = np.zeros((4, 4), np.int64), []
    for i, (h, w) in enumerate(SIZES):
        image = np.asarray(Image.open(os.path.join(root, "val", "images", f"{i}.png")))
        scale = WINDOW / min(h, w)
        scaled = resize(image, (max(WINDOW, round(h * scale)), max(WINDOW, round(w * scale)))) / 127.5 - 1
        output = reference_slide(predict, scaled, WINDOW, stride)
        output = resize(output if task == "semantic" else output[..., None], (h, w))
        if task == "semantic":
            target = np.asarray(Image.open(os.path.join(root, "val", "masks", f"{i}.png")))
            confusion += confusion_matrix(target, output.argmax(-1), 4)
        else:
            errors.append(depth_errors(np.load(os.path.join(root, "val", "depth", f"{i}.npy")), output[..., 0]))
    return segmentation_scores(confusion) if task == "semantic" else mean_depth_errors(errors)


@pytest.mark.parametrize("task", ["semantic", "depth"])
def test_evaluate_with_a_sliding_window_matches_numpy(folder, models, task):
    model, path = models[task]
    got = evaluate_dense(path, folder, sliding_window=True, stride=6)
    assert got["examples"] == 4 and got["window"] == "16 px windows 6 px apart"
    expected = numpy_scores(model, folder, task, 6)
    for key in ("miou", "pixel_accuracy") if task == "semantic" else ("abs_rel", "rmse", "delta1"):
        assert abs(got[key] - expected[key]) < 1e-5, (key, got[key], expected[key])  # measured <= 1.5e-7
    whole = evaluate_dense(path, folder)
    assert whole["window"] is None and any(whole[key] != got[key] for key in expected)  # the windows mattered


@pytest.mark.parametrize("task", ["semantic", "depth"])
def test_whole_image_equals_sliding_window_where_the_image_is_the_window(tmp_path, folder, models, task):
    model, path = models[task]
    square = tmp_path / "square"
    for split in ("train", "val"):
        for name in ("images", "masks", "depth"):
            os.makedirs(square / split / name)
            suffix = ".npy" if name == "depth" else ".png"
            for k in (0, 3) if split == "val" else (0,):
                os.link(os.path.join(folder, split, name, f"{k}{suffix}"), square / split / name / f"{k}{suffix}")
    whole = evaluate_dense(path, str(square))
    sliding = evaluate_dense(path, str(square), sliding_window=True, stride=5)
    assert whole.pop("window") is None and sliding.pop("window")
    assert whole.keys() == sliding.keys()
    for key, value in whole.items():  # the same windows; batched otherwise (float32 sums)
        assert sliding[key] == (pytest.approx(value, rel=1e-6) if isinstance(value, float) else value), key


def test_the_recipe_says_slide_and_the_command_line_reports_it(tmp_path, folder, models, capsys):
    """A run folder whose config.json says eval_window=slide, eval_stride=6: `keras-vit evaluate` slides
    (the scores of `sliding_window=True, stride=6`), `--no-sliding-window` takes whole images."""
    model, _ = models["semantic"]
    run = tmp_path / "run"
    run.mkdir()
    model.save(run / "best.keras")
    (run / "config.json").write_text(json.dumps({"data": folder, "task": "segmentation", "eval_window": "slide",
                                                 "eval_stride": 6}))
    (run / "classes.json").write_text(json.dumps({"task": "semantic", "class_names": ["a", "b", "c", "d"]}))
    assert main(["evaluate", str(run / "best.keras")]) == 0
    out = capsys.readouterr().out
    expected = evaluate_dense(str(run / "best.keras"), sliding_window=True, stride=6)
    assert "(sliding: 16 px windows 6 px apart)" in out and f"mIoU {expected['miou']:.4f}" in out
    assert main(["evaluate", str(run / "best.keras"), "--no-sliding-window"]) == 0
    assert "sliding" not in capsys.readouterr().out


@pytest.mark.backend_independent  # argument handling
@pytest.mark.parametrize("flags, message", [
    (["--sliding-window", "--stride", "17"], "--stride 17 is larger than the window 16"),
    (["--stride", "4"], "--stride 4 is the step of --sliding-window"),
    (["--sliding-window", "--window", "32"], "--window 32: the model takes 16x16 images"),
    (["--depth-scale", "256"], "--depth-scale is for a depth model"),
    (["--depth-scale", "-1"], "depth_scale=-1.0 must be a number > 0"),
])
def test_bad_window_flags_are_one_line_exit_2(folder, models, capsys, flags, message):
    fails(["evaluate", models["semantic"][1], "--data", folder, *flags], capsys, message)
