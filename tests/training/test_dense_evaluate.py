"""`keras-vit evaluate` of dense models: scores at each image's own size, against NumPy; agreeing with
the run's own validation."""

import os

import keras
import numpy as np
import pytest
from PIL import Image

import keras_vit
from keras_vit.cli import main
from keras_vit.dense.data import load_dense_source
from keras_vit.dense.labels import IGNORE
from keras_vit.evaluation.dense import evaluate_dense
from keras_vit.data.images import resize
from keras_vit.training import recipe, train
from tests.support.dense_data import shape_sample, write_shapes


@pytest.fixture(scope="module")
def odd_sizes(tmp_path_factory):
    """Six images of other sizes than the model's, with masks (some pixels not labelled) and depth."""
    root = str(tmp_path_factory.mktemp("odd"))
    rng = np.random.default_rng(0)
    for folder in ("images", "masks", "depth"):
        os.makedirs(os.path.join(root, folder))
    for i, (h, w) in enumerate([(40, 48), (24, 24), (64, 40)] * 2):
        image, mask = shape_sample(rng, 64)
        image, mask = image[:h, :w], mask[:h, :w].copy()
        mask[0] = IGNORE
        Image.fromarray(image).save(os.path.join(root, "images", f"{i}.png"))
        Image.fromarray(mask).save(os.path.join(root, "masks", f"{i}.png"))
        np.save(os.path.join(root, "depth", f"{i}.npy"), np.where(mask == IGNORE, 0, 1.0 + mask).astype(np.float32))
    return root


def _model(task, tmp_path):
    keras.utils.set_random_seed(1)
    backbone = keras_vit.VisionTransformer(8, 32, 1, 2, 64, include_top=False, input_shape=(32, 32, 3))
    model = keras_vit.DenseModel(backbone, head="linear", task=task, num_classes=4 if task == "semantic" else None)
    if task == "depth":  # a positive output everywhere
        model.get_layer("linear_head").conv.bias.assign([1.0])
    path = str(tmp_path / f"{task}.keras")
    model.save(path)
    return model, path


def _numpy_predictions(model, pairs, task):
    images = [np.asarray(Image.open(image_path).convert("RGB")) for image_path, _ in pairs]
    outputs = np.asarray(model.predict_on_batch(np.stack([(resize(i, (32, 32)) - 127.5) / 127.5 for i in images])))
    for (_, target_path), out in zip(pairs, outputs):
        target = np.load(target_path) if target_path.endswith(".npy") else np.asarray(Image.open(target_path))
        out = resize(out if task == "semantic" else out[..., None], target.shape)
        yield (out.argmax(-1) if task == "semantic" else out[..., 0]), target


def test_segmentation_scores_at_each_images_own_size(odd_sizes, tmp_path):
    model, path = _model("semantic", tmp_path)
    results = evaluate_dense(path, odd_sizes, split="train")
    pairs = load_dense_source(odd_sizes, "semantic").train
    confusion = np.zeros((4, 4))
    for predicted, target in _numpy_predictions(model, pairs, "semantic"):
        assert predicted.shape == target.shape
        keep = target != IGNORE
        np.add.at(confusion, (target[keep], predicted[keep]), 1)
    union = confusion.sum(0) + confusion.sum(1) - np.diag(confusion)
    iou = np.diag(confusion)[union > 0] / union[union > 0]
    assert results["examples"] == len(pairs) == 5
    np.testing.assert_allclose(results["miou"], iou.mean(), atol=0.01)
    np.testing.assert_allclose(results["pixel_accuracy"], np.trace(confusion) / confusion.sum(), atol=0.01)


def test_depth_scores_at_each_images_own_size(odd_sizes, tmp_path):
    model, path = _model("depth", tmp_path)
    results = evaluate_dense(path, odd_sizes, split="train")
    rel, rmse, d1 = [], [], []
    for predicted, target in _numpy_predictions(model, load_dense_source(odd_sizes, "depth").train, "depth"):
        t, p = target[target > 0], np.maximum(predicted[target > 0], 1e-6)
        rel.append(np.mean(np.abs(t - p) / t))
        rmse.append(np.sqrt(np.mean((t - p) ** 2)))
        d1.append(np.mean(np.maximum(t / p, p / t) < 1.25))
    np.testing.assert_allclose([results["abs_rel"], results["rmse"], results["delta1"]],
                               [np.mean(rel), np.mean(rmse), np.mean(d1)], rtol=1e-3, atol=1e-3)


def test_evaluate_on_the_run_folder_agrees_with_its_validation(tmp_path, capsys):
    data = write_shapes(str(tmp_path / "shapes"), count=16, size=32)
    result = train(recipe("digits", task="segmentation", image_size=32, patch_size=8, hidden_dim=32, depth=1,
                          num_heads=2, mlp_dim=64, batch_size=8, steps=2, tensorboard=False, verbose=0,
                          val_fraction=0.25, output_dir=str(tmp_path / "run")), data=data)
    assert main(["evaluate", result.best_path]) == 0
    printed = capsys.readouterr().out
    miou = float(printed.split("mIoU ")[1].split(",")[0])
    np.testing.assert_allclose(miou, result.scores["miou"], atol=1e-4)  # images at the model's size: the same pixels
    assert "pixel accuracy" in printed and "square" in printed
    assert main(["evaluate", result.best_path, "--data", str(tmp_path / "nothing")]) == 2
    assert "No such data folder" in capsys.readouterr().err
