"""The zero-shot classifier (`ImageTextModel.classifier`, `keras-vit zero-shot --save-classifier`):
an ordinary keras_vit Vision Transformer whose head reads unit-length image features, initialised
from the labels' text features; before training its probabilities are transformers' CLIP
`logits_per_image` softmax, and `keras-vit train --weights` fine-tunes it."""

import os

import keras
import numpy as np
import pytest
from PIL import Image

import keras_vit
from keras_vit.cli import main
from tests.support import JIT
from tests.support.commands import fails
from tests.support.text import IMAGE, clip_folder

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

LABELS = ["cat", "dog", "red car"]  # the class folders' names sort in this order
TEMPLATE = "a photo of a {}"
ARCHITECTURE = ["--image-size", str(IMAGE), "--patch-size", "8", "--hidden-dim", "32", "--depth", "2", "--num-heads",
                "4", "--mlp-dim", "64", "--pooling", "token", "--epochs", "1", "--batch-size", "4", "--tensorboard", "false", "--verbose", "0",
                "--set", f"jit_compile={JIT}"]


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    root = tmp_path_factory.mktemp("classifier")
    folder = str(root / "clip")
    model = clip_folder(folder)
    images = np.random.default_rng(0).integers(0, 256, (6, IMAGE, IMAGE, 3), dtype=np.uint8)
    for i, image in enumerate(images):
        for split in ("train", "validation"):
            os.makedirs(root / "data" / split / LABELS[i % 3], exist_ok=True)
            Image.fromarray(image).save(root / "data" / split / LABELS[i % 3] / f"{i}.png")
    texts = [TEMPLATE.replace("{}", label) for label in LABELS]
    ids = transformers.CLIPTokenizer.from_pretrained(folder)(texts, padding="max_length", max_length=77,
                                                             return_tensors="pt")["input_ids"]
    pixels = transformers.CLIPImageProcessor.from_pretrained(folder)(list(images), return_tensors="pt")["pixel_values"]
    with torch.no_grad():
        probabilities = model(input_ids=ids, pixel_values=pixels).logits_per_image.softmax(-1).numpy()
    return folder, root, images, probabilities


def test_the_classifier_gives_transformers_zero_shot_probabilities(clip, tmp_path):
    folder, _, images, expected = clip
    pair = keras_vit.ImageTextModel.from_checkpoint(folder)
    classifier = pair.classifier(LABELS, template=TEMPLATE)
    assert [layer.name for layer in classifier.layers][-4:] == ["projection", "unit_features", "head", "predictions"]
    inputs = pair.image_inputs(images)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(classifier(inputs)), expected, atol=1e-5, rtol=0)
    classifier.save(tmp_path / "c.keras")
    again = keras_vit.VisionTransformer(weights=str(tmp_path / "c.keras"), patch_size=8, hidden_dim=32, depth=2,
                                        num_heads=4, mlp_dim=64, pre_norm=True, patch_bias=False, projection_dim=24,
                                        unit_features=True, classes=3)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(again(inputs)), expected, atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="build it with unit_features=True"):
        keras_vit.VisionTransformer(weights=str(tmp_path / "c.keras"), patch_size=8, hidden_dim=32, depth=2,
                                    num_heads=4, mlp_dim=64, pre_norm=True, patch_bias=False, projection_dim=24,
                                    classes=3)


def test_save_classifier_then_train_from_it(clip, tmp_path, capsys):
    folder, root, images, expected = clip
    out = str(tmp_path / "zero_shot.keras")
    assert main(["zero-shot", "--weights", folder, "--labels", *LABELS, "--template", TEMPLATE,
                 "--save-classifier", out]) == 0
    assert "Wrote the zero-shot classifier of 3 labels" in capsys.readouterr().out
    saved = keras.saving.load_model(out)
    inputs = keras_vit.ImageTextModel.from_checkpoint(folder).image_inputs(images)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(saved(inputs)), expected, atol=1e-5, rtol=0)
    # with learning rate 0 the trained model is the classifier: its head and the tower's options came along
    data = ["--data", str(root / "data")]
    assert main(["train", "--weights", out, *data, *ARCHITECTURE, "--learning-rate", "0",
                 "--output-dir", str(tmp_path / "frozen")]) == 0
    trained = keras.saving.load_model(tmp_path / "frozen" / "final.keras")
    np.testing.assert_allclose(keras.ops.convert_to_numpy(trained(inputs)), expected, atol=1e-5, rtol=0)


@pytest.mark.backend_independent
def test_bad_classifier_outputs_stop_in_one_line(clip, tmp_path, capsys):
    folder = clip[0]
    fails(["zero-shot", "--weights", folder, "--labels", "a", "b"], capsys, "--save-classifier")
    fails(["zero-shot", "--weights", folder, "--labels", "a", "--save-classifier", str(tmp_path / "c.h5")], capsys,
          "expected a .keras file name")
    (tmp_path / "taken.keras").write_text("x")
    fails(["zero-shot", "--weights", folder, "--labels", "a", "--save-classifier", str(tmp_path / "taken.keras")],
          capsys, "taken.keras")
    assert sorted(os.listdir(tmp_path)) == ["taken.keras"]
    with pytest.raises(ValueError, match="unit_features=True scales"):
        keras_vit.VisionTransformer(include_top=False, unit_features=True, weights=None)
