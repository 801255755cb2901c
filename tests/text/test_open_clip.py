"""OpenCLIP folders (`open_clip_model.safetensors` / `open_clip_pytorch_model.bin`,
`open_clip_config.json`, CLIP's tokenizer files) through `ImageTextModel.from_checkpoint`: a random
transformers `CLIPModel` rewritten in OpenCLIP's key layout (tests/support/text.py), its image and
text features and zero-shot probabilities against transformers' from uint8 images and strings; and
MetaCLIP 2 (`MetaClip2Model`) folders."""

import json
import os
import shutil

import numpy as np
import pytest

import keras_vit
from tests.support.text import IMAGE, clip_folder, metaclip2_folder, open_clip_folder

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

TOLERANCE = 1e-5
LABELS = ["a photo of a cat", "A Photo, of a DOG!!", "two dogs", "a " + "very " * 80 + "long text", "zebra's 42"]


def _reference(folder, model, images):
    ids = transformers.CLIPTokenizer.from_pretrained(folder)(LABELS, padding="max_length", max_length=77,
                                                             truncation=True, return_tensors="pt")["input_ids"]
    pixels = transformers.CLIPImageProcessor(size={"shortest_edge": IMAGE}, crop_size={"height": IMAGE, "width": IMAGE})(
        list(images), return_tensors="pt")["pixel_values"]
    with torch.no_grad():
        out = model(input_ids=ids, pixel_values=pixels)
        image, text = model.get_image_features(pixel_values=pixels), model.get_text_features(input_ids=ids)
    image, text = (getattr(f, "pooler_output", f).numpy() for f in (image, text))
    return image, text, out.logits_per_image.softmax(-1).numpy()


@pytest.fixture(scope="module", params=["safetensors", "bin"])
def open_clip(request, tmp_path_factory):
    folder = str(tmp_path_factory.mktemp(f"open_clip_{request.param}"))
    model = open_clip_folder(folder, request.param)
    images = np.random.default_rng(0).integers(0, 256, (3, IMAGE, IMAGE + 8, 3), dtype=np.uint8)
    return folder, images, _reference(folder, model, images), request.param


def test_open_clip_features_and_probabilities_match_transformers(open_clip):
    folder, images, (image, text, probabilities), kind = open_clip
    name = "open_clip_model.safetensors" if kind == "safetensors" else "open_clip_pytorch_model.bin"
    for source in (folder, os.path.join(folder, name)):
        model = keras_vit.ImageTextModel.from_checkpoint(source)
        assert model.family == "clip" and model.processing.shortest_edge == IMAGE
        np.testing.assert_allclose(model.encode_text(LABELS), text, atol=TOLERANCE, rtol=0)
        np.testing.assert_allclose(model.encode_image(images), image, atol=TOLERANCE, rtol=0)
        np.testing.assert_allclose(model.zero_shot(images, LABELS), probabilities, atol=TOLERANCE, rtol=0)


@pytest.mark.backend_independent
def test_bad_open_clip_folders_are_refused_in_one_line(open_clip, tmp_path):
    folder, _, _, kind = open_clip
    if kind != "safetensors":
        pytest.skip("one layout is enough")
    edited = str(tmp_path / "hf_text")
    shutil.copytree(folder, edited)
    with open(os.path.join(edited, "open_clip_config.json"), encoding="utf-8") as handle:
        config = json.load(handle)
    config["model_cfg"]["text_cfg"]["hf_model_name"] = "xlm-roberta-base"
    with open(os.path.join(edited, "open_clip_config.json"), "w", encoding="utf-8") as handle:
        json.dump(config, handle)
    with pytest.raises(ValueError, match=r"hf_model_name.*keras_vit reads OpenCLIP's text transformer") as error:
        keras_vit.ImageTextModel.from_checkpoint(edited)
    assert "\n" not in str(error.value)
    layers = config["model_cfg"]["text_cfg"]["layers"]
    config["model_cfg"]["text_cfg"] = {**config["model_cfg"]["text_cfg"], "hf_model_name": None, "layers": layers + 1}
    with open(os.path.join(edited, "open_clip_config.json"), "w", encoding="utf-8") as handle:
        json.dump(config, handle)
    with pytest.raises(ValueError, match=f"declares {layers + 1} text blocks but its tensors hold {layers}"):
        keras_vit.ImageTextModel.from_checkpoint(edited)
    bare = str(tmp_path / "no_tokenizer")
    os.makedirs(bare)
    for name in ("open_clip_model.safetensors", "open_clip_config.json"):
        shutil.copy(os.path.join(folder, name), bare)
    with pytest.raises(ValueError, match="no tokenizer.json, nor vocab.json and merges.txt"):
        keras_vit.ImageTextModel.from_checkpoint(bare)


@pytest.mark.parametrize("eos_token_id", [1, 2])
def test_metaclip2_matches_transformers(tmp_path, eos_token_id):
    """MetaCLIP 2 pools at its end-of-text id even where that is 2 (XLM-V's), unlike OpenAI CLIP's configs."""
    folder = str(tmp_path)
    model = clip_folder(folder, kind="MetaClip2", eos_token_id=eos_token_id)
    ids = transformers.CLIPTokenizer.from_pretrained(folder)(LABELS, padding="max_length", max_length=77,
                                                             truncation=True, return_tensors="pt")["input_ids"]
    if eos_token_id == 2:  # the tokenizer's end-of-text is 1: write the model's instead, somewhere inside each row
        ids[torch.arange(len(LABELS)), torch.tensor([3, 9, 5, 40, 7])] = 2
    with torch.no_grad():
        expected = model.get_text_features(input_ids=ids)
    expected = getattr(expected, "pooler_output", expected).numpy()
    ours = keras_vit.ImageTextModel.from_checkpoint(folder)
    got = ours.text_model.predict(ids.numpy().astype(np.int32), verbose=0)
    np.testing.assert_allclose(got, expected, atol=TOLERANCE, rtol=0)
    images = np.random.default_rng(0).integers(0, 256, (2, IMAGE, IMAGE, 3), dtype=np.uint8)
    pixels = transformers.CLIPImageProcessor.from_pretrained(folder)(list(images), return_tensors="pt")["pixel_values"]
    with torch.no_grad():
        image = model.get_image_features(pixel_values=pixels)
    np.testing.assert_allclose(ours.encode_image(images), getattr(image, "pooler_output", image).numpy(),
                               atol=TOLERANCE, rtol=0)


def test_metaclip2_with_its_xlmv_tokenizer_matches_transformers(tmp_path):
    """MetaCLIP 2's own tokenizer files (XLM-V: a Unigram `tokenizer.json`, `<s> ... </s>` padded
    with `<pad>`, end-of-text id 2): the ids, text features and probabilities of transformers'."""
    folder = str(tmp_path)
    model = metaclip2_folder(folder)
    ids = transformers.AutoTokenizer.from_pretrained(folder)(LABELS, padding="max_length", max_length=77,
                                                             truncation=True, return_tensors="pt")["input_ids"]
    images = np.random.default_rng(0).integers(0, 256, (2, IMAGE, IMAGE, 3), dtype=np.uint8)
    pixels = transformers.CLIPImageProcessor.from_pretrained(folder)(list(images), return_tensors="pt")["pixel_values"]
    with torch.no_grad():
        text = model.get_text_features(input_ids=ids)
        probabilities = model(input_ids=ids, pixel_values=pixels).logits_per_image.softmax(-1).numpy()
    ours = keras_vit.ImageTextModel.from_checkpoint(folder)
    np.testing.assert_array_equal(ours.tokenizer(LABELS), ids.numpy())
    np.testing.assert_allclose(ours.encode_text(LABELS), getattr(text, "pooler_output", text).numpy(), atol=TOLERANCE,
                               rtol=0)
    np.testing.assert_allclose(ours.zero_shot(images, LABELS), probabilities, atol=TOLERANCE, rtol=0)
