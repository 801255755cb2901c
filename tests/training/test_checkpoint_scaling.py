"""Fine-tuning a checkpoint that scales its images by its own mean / std (a CLIP tower's zero-shot
classifier: OpenAI's mean / std; a CLIP tower alone reads the same weights' metadata): the
run's model records the checkpoint's preprocessing, the training and validation pipelines feed it
that view (not [-1, 1]), config.json records it, and evaluation of the saved model uses it."""

import csv
import json
import os

import keras
import numpy as np
import pytest
from PIL import Image

from keras_vit.evaluation.classification import evaluate
import keras_vit
from keras_vit.cli import main
from keras_vit.preprocessing import CLIP_MEAN, CLIP_STD
from tests.support import JIT
from tests.support.commands import fails
from tests.support.text import IMAGE, clip_folder

pytest.importorskip("transformers")

LABELS = ["cat", "dog"]
RUN = ["--image-size", str(IMAGE), "--patch-size", "8", "--hidden-dim", "32", "--depth", "2", "--num-heads", "4",
       "--mlp-dim", "64", "--pooling", "token", "--epochs", "1", "--batch-size", "4", "--tensorboard", "false",
       "--verbose", "0", "--learning-rate", "0", "--set", "crop_area=1,1", "--set", "crop_aspect=1,1",
       "--set", "flip=false", "--set", "label_smoothing=0", "--set", "drop_path=0", "--set", f"jit_compile={JIT}",
       "--set", "deterministic=true"]  # the first batch: the four images of the first pass, whatever the timing


def clip_view(images):
    """NumPy's CLIP normalisation of uint8 `images`."""
    return ((images / 255.0 - np.array(CLIP_MEAN)) / np.array(CLIP_STD)).astype(np.float32)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A CLIP zero-shot classifier fine-tuned (learning rate 0, one step of all four training images)."""
    root = tmp_path_factory.mktemp("clip_scaling")
    clip_folder(str(root / "clip"))
    classifier = keras_vit.ImageTextModel.from_checkpoint(str(root / "clip")).classifier(LABELS)
    head = classifier.get_layer("head")  # sharper than the random logit scale's: the loss tells the views apart
    head.kernel.assign(head.kernel * 50.0)
    classifier.save(root / "zero_shot.keras")
    images = np.random.default_rng(0).integers(0, 256, (4, IMAGE, IMAGE, 3), dtype=np.uint8)
    for i, image in enumerate(images):
        for split in ("train", "validation"):
            os.makedirs(root / "data" / split / LABELS[i % 2], exist_ok=True)
            Image.fromarray(image).save(root / "data" / split / LABELS[i % 2] / f"{i}.png")
    out = root / "run"
    assert main(["train", "--weights", str(root / "zero_shot.keras"), "--data", str(root / "data"), *RUN,
                 "--output-dir", str(out)]) == 0
    return root, out, images, np.arange(4) % 2


def _loss(model, x, labels):
    probabilities = keras.ops.convert_to_numpy(model(x)).astype(np.float64)
    return float(-np.log(probabilities[np.arange(len(labels)), labels]).mean())


def test_fine_tuning_a_clip_tower_feeds_it_clip_normalised_images(run):
    root, out, images, labels = run
    with open(out / "config.json", encoding="utf-8") as handle:
        assert json.load(handle)["preprocessing"] == "clip"
    model = keras.saving.load_model(out / "final.keras")  # learning rate 0: the weights trained on
    assert model.preprocessing == "clip"
    with open(out / "log.csv", encoding="utf-8") as handle:
        logged = next(csv.DictReader(handle))
    # the first (only) training batch and the validation batches: the CLIP view of the images, not [-1, 1]
    expected = _loss(model, clip_view(images), labels)
    assert abs(_loss(model, images / 127.5 - 1, labels) - expected) > 1e-3
    np.testing.assert_allclose(float(logged["loss"]), expected, atol=1e-5, rtol=0)
    np.testing.assert_allclose(float(logged["val_loss"]), expected, atol=1e-5, rtol=0)
    # evaluation of the saved model scales as training did
    np.testing.assert_allclose(evaluate(str(out / "final.keras"))["loss"], expected, atol=1e-5, rtol=0)


@pytest.mark.backend_independent
def test_the_pipelines_normalise_by_the_preprocessing():
    """The host pipeline's and the training step's scaling of one batch, against NumPy's."""
    import tensorflow as tf

    from keras_vit.data import augment
    from keras_vit.preprocessing import preprocessing
    from keras_vit.training.on_step import finish

    images = np.random.default_rng(1).integers(0, 256, (2, 4, 4, 3), dtype=np.uint8)
    clip = preprocessing("clip")
    np.testing.assert_allclose(augment.normalise(tf.constant(images), clip).numpy(), clip_view(images), atol=1e-5)
    x, _ = finish((images, np.zeros(2)), clip)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(x), clip_view(images), atol=1e-5)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(finish((images, np.zeros(2)))[0]), images / 127.5 - 1,
                               atol=1e-6)


@pytest.mark.backend_independent
def test_a_checkpoint_scaling_is_refused_where_runs_scale_to_unit(run, tmp_path, capsys):
    root = run[0]
    fails(["pretrain", "--weights", str(root / "clip"), "--data", str(root / "data"), "--set", "preprocessing=clip",
           "--output-dir", str(tmp_path / "p")], capsys, "preprocessing='clip': keras-vit pretrain scales its images to [-1, 1]")
    assert not os.path.exists(tmp_path / "p")
