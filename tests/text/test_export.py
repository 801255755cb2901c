"""`keras-vit export FOLDER --tower image|text` / `export_tower`: each tower of a random
transformers `CLIPModel` in the serving formats this backend writes, run in its own runtime at
batch sizes it was not traced at, against transformers' `get_text_features` on the ids of the
tokenizer copied beside the export, and `get_image_features`."""

import json
import os

import numpy as np
import pytest

import keras_vit
from keras_vit.cli import main
from keras_vit.inference import serving
from keras_vit.inference.image_text_export import export_tower
from keras_vit.text import image_processing
from tests.support import BACKEND
from tests.support.text import IMAGE, clip_folder

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

TEXTS = ["a photo of a cat", "A Photo, of a DOG!!", "two dogs", "a " + "very " * 80 + "long text", "zebra's 42"]
# this backend's own writers among the formats the issue names
WRITTEN_HERE = [fmt for fmt in ("onnx", "saved_model", "litert") if BACKEND in serving.SPECS[fmt].writers]


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    folder = str(tmp_path_factory.mktemp("clip"))
    model = clip_folder(folder)
    ids = transformers.CLIPTokenizer.from_pretrained(folder)(TEXTS, padding="max_length", max_length=77,
                                                             truncation=True, return_tensors="pt")["input_ids"]
    images = np.random.default_rng(0).integers(0, 256, (4, IMAGE + 8, IMAGE, 3), dtype=np.uint8)
    pixels = transformers.CLIPImageProcessor.from_pretrained(folder)(list(images), return_tensors="pt")["pixel_values"]
    with torch.no_grad():
        text = model.get_text_features(input_ids=ids)
        image = model.get_image_features(pixel_values=pixels)
    reference = {"text": getattr(text, "pooler_output", text).numpy(), "image": getattr(image, "pooler_output", image).numpy()}
    return folder, images, reference


def _export(folder, tower, out, capsys):
    assert main(["export", folder, "--tower", tower, "--format", ",".join(WRITTEN_HERE), "--output", out,
                 "--atol", "1e-5"]) == 0
    assert capsys.readouterr().out.count("outputs match the Keras model within") == len(WRITTEN_HERE)
    for fmt in WRITTEN_HERE:  # as `export` names them
        path = out + (serving.SPECS[fmt].suffix if len(WRITTEN_HERE) > 1 else "")
        with open(path + ".serving.json", encoding="utf-8") as f:
            yield fmt, path, json.load(f)


@pytest.mark.skipif(not WRITTEN_HERE, reason="this backend writes none of onnx, saved_model, litert")
def test_the_text_tower_exports_with_its_tokenizer(clip, tmp_path, capsys):
    folder, _, reference = clip
    for fmt, path, card in _export(folder, "text", str(tmp_path / "text"), capsys):
        assert card["input"]["dtype"] == "int32" and card["input"]["dynamic"] == ["batch"]
        assert {"vocab.json", "merges.txt"} <= set(card["tokenizer"]["files"])
        tokenizer = keras_vit.text.tokenizer_from_folder(os.path.join(tmp_path, card["tokenizer"]["folder"]),
                                                         card["tokenizer"]["family"], card["tokenizer"]["context"])
        for texts, expected in ((TEXTS, reference["text"]), (TEXTS[1:2], reference["text"][1:2])):
            got = serving.run_exported(fmt, path, tokenizer(texts))
            np.testing.assert_allclose(got, expected, atol=1e-5, rtol=0, err_msg=fmt)


@pytest.mark.skipif(not WRITTEN_HERE, reason="this backend writes none of onnx, saved_model, litert")
def test_the_image_tower_exports_with_its_image_processing(clip, tmp_path, capsys):
    folder, images, reference = clip
    pair = keras_vit.ImageTextModel.from_checkpoint(folder)
    pixels = pair.image_inputs(images)
    for fmt, image_path, card in _export(folder, "image", str(tmp_path / "image"), capsys):
        processing = image_processing.ImageProcessing(**{k: tuple(v) if isinstance(v, list) else v
                                                         for k, v in card["preprocessing"].items()
                                                         if k not in ("name", "steps")})
        assert processing == pair.processing and card["output"]["holds"].startswith("image features")
        got = serving.run_exported(fmt, image_path, pixels)
        np.testing.assert_allclose(got, reference["image"], atol=1e-5, rtol=0, err_msg=fmt)


@pytest.mark.backend_independent
def test_bad_tower_exports_stop_in_one_line(clip, tmp_path, capsys):
    folder = clip[0]
    for argv, match in ((["export", os.path.join(folder, "config.json"), "--tower", "text"], "image-text folder"),
                        (["export", folder, "--tower", "sound"], "invalid choice")):
        with pytest.raises(SystemExit) if "sound" in argv else _nothing():
            assert main([*argv, "--output", str(tmp_path / "x")]) == 2
        assert match in capsys.readouterr().err
    assert os.listdir(tmp_path) == []
    with pytest.raises(ValueError, match="tower='sound'"):
        export_tower(keras_vit.ImageTextModel.from_checkpoint(folder), "sound", "onnx", str(tmp_path / "x"))


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False
