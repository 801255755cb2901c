"""`keras-vit zero-shot` and `keras-vit embed` on a tiny random SigLIP folder: what they print and
write is `ImageTextModel`'s; bad input stops with one line, exit code 2, nothing written."""

import json

import numpy as np
import pytest
from PIL import Image

import keras_vit
from keras_vit.cli import main
from tests.support.commands import fails
from tests.support.text import IMAGE, siglip_folder

pytest.importorskip("transformers")
LABELS = ["a photo of a cat", "a photo of a dog", "a red car"]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("zero_shot")
    siglip_folder(str(root / "siglip"))
    paths = []
    for i, image in enumerate(np.random.default_rng(0).integers(0, 256, (2, IMAGE, IMAGE, 3), dtype=np.uint8)):
        paths.append(str(root / f"{i}.png"))
        Image.fromarray(image).save(paths[-1])
    return str(root / "siglip"), paths, keras_vit.ImageTextModel.from_checkpoint(root / "siglip")


def test_zero_shot_prints_each_images_labels_by_probability(setup, capsys):
    folder, paths, model = setup
    expected = model.zero_shot(paths, ["cat", "dog", "car"], template="a photo of a {}")
    assert main(["zero-shot", *paths, "--weights", folder, "--labels", "cat", "dog", "car",
                 "--template", "a photo of a {}", "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [row["image"] for row in rows] == paths
    for row, probabilities in zip(rows, expected):
        order = np.argsort(-probabilities)
        assert row["labels"] == [["cat", "dog", "car"][i] for i in order]
        np.testing.assert_allclose(row["probabilities"], probabilities[order], atol=1e-6)
    assert main(["zero-shot", paths[0], "--weights", folder, "--labels", *LABELS]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == paths[0] and len(lines) == 1 + len(LABELS) and lines[1].startswith("  1. ")


def test_embed_writes_the_features(setup, tmp_path, capsys):
    folder, paths, model = setup
    assert main(["embed", *paths, "--weights", folder, "--output", str(tmp_path / "images.npy")]) == 0
    np.testing.assert_allclose(np.load(tmp_path / "images.npy"), model.encode_image(paths), atol=1e-6)
    assert main(["embed", "--text", *LABELS, "--weights", folder, "--output", str(tmp_path / "texts.npy")]) == 0
    np.testing.assert_allclose(np.load(tmp_path / "texts.npy"), model.encode_text(LABELS), atol=1e-6)
    assert "Wrote 3 text features" in capsys.readouterr().out


def test_bad_input_stops_in_one_line_and_writes_nothing(setup, tmp_path, capsys):
    folder, paths, _ = setup
    out = tmp_path / "out.npy"
    fails(["zero-shot", paths[0], "--weights", folder, "--labels", "cat", ""], capsys, "not a non-empty string")
    fails(["zero-shot", tmp_path / "missing.png", "--weights", folder, "--labels", "cat"], capsys, "No image file")
    fails(["zero-shot", paths[0], "--weights", tmp_path / "none", "--labels", "cat"], capsys, "no such folder")
    fails(["zero-shot", paths[0], "--weights", folder, "--labels", "cat", "--template", "a photo"], capsys, "{}")
    fails(["embed", *paths, "--text", "cat", "--weights", folder, "--output", out], capsys, "not both")
    fails(["embed", "--weights", folder, "--output", out], capsys, "not neither")
    fails(["embed", "--text", "cat", "  ", "--weights", folder, "--output", out], capsys, "non-empty string")
    fails(["embed", "--text", "cat", "--weights", folder, "--output", tmp_path / "out.txt"], capsys, ".npy")
    assert list(tmp_path.iterdir()) == []
    import transformers

    from tests.support.text import VISION

    transformers.SiglipVisionModel(transformers.SiglipVisionConfig(**VISION)).save_pretrained(tmp_path / "vision")
    capsys.readouterr()
    fails(["zero-shot", paths[0], "--weights", tmp_path / "vision", "--labels", "cat"], capsys,
          "image tower alone use keras_vit.from_checkpoint")
    fails(["embed", "--text", "cat", "--weights", tmp_path / "vision", "--output", out], capsys, "keras_vit.from_checkpoint")
    assert not out.exists()
    with pytest.raises(SystemExit):  # argparse: --labels needs at least one
        main(["zero-shot", paths[0], "--weights", folder, "--labels"])


def test_evaluate_zero_shot_on_an_image_folder(setup, tmp_path, capsys):
    folder, _, model = setup
    classes, images, truth = ["a_cat", "a_dog", "big_red_car"], [], []
    rng = np.random.default_rng(3)
    for label, name in enumerate(classes):
        for i in range(3):
            image = rng.integers(0, 256, (IMAGE, IMAGE, 3), dtype=np.uint8)
            (tmp_path / "data" / name).mkdir(parents=True, exist_ok=True)
            Image.fromarray(image).save(tmp_path / "data" / name / f"{i}.png")
            images.append(image)
            truth.append(label)
    probabilities = model.zero_shot(np.stack(images), ["a cat", "a dog", "big red car"], template="a photo of {}")
    expected = np.mean(np.argmax(probabilities, axis=1) == truth)
    assert main(["evaluate", folder, "--zero-shot", "--data", str(tmp_path / "data"),
                 "--template", "a photo of {}"]) == 0
    out = capsys.readouterr().out
    assert "zero-shot on 9 images of 3 classes" in out and f"top-1 {expected:.4f}, top-5 1.0000" in out
    fails(["evaluate", folder, "--zero-shot"], capsys, "--zero-shot needs --data DIR")
    fails(["evaluate", folder, "--zero-shot", "--data", tmp_path / "data", "--template", "x"], capsys, "{}")
    fails(["evaluate", folder, "--template", "a {}"], capsys, "--template is for --zero-shot only")
    fails(["evaluate", folder, "--zero-shot", "--fewshot", "1", "--data", tmp_path / "data"], capsys, "choose one")
    fails(["evaluate", folder, "--zero-shot", "--data", tmp_path / "data", "--batch-size", "0"], capsys,
          "batch_size=0 must be a whole number >= 1")


def test_a_folder_without_weights_is_refused_in_one_line(tmp_path, capsys):
    """An empty folder ended in an IndexError traceback from the folder reader."""

    (tmp_path / "empty").mkdir()
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(tmp_path / "a.png")
    assert main(["zero-shot", str(tmp_path / "a.png"), "--weights", str(tmp_path / "empty"), "--labels", "cat"]) == 2
    err = capsys.readouterr().err
    assert "no weights file in the folder" in err and err.count("\n") == 1
