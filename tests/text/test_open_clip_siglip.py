"""OpenCLIP's SigLIP and SigLIP 2 folders (`CustomTextCLIP`: `visual.trunk.*` timm image tower,
`text.*` text tower without causal mask pooled at the last token, `logit_bias`; the Hugging Face
tokenizer files with OpenCLIP's `canonicalize` clean-up) through `ImageTextModel.from_checkpoint`:
a random transformers `SiglipModel` rewritten in OpenCLIP's layout (tests/support/text.py), its
features and sigmoid probabilities against transformers' from uint8 images and strings."""

import html
import json
import os
import shutil
import string

import numpy as np
import pytest

import keras_vit
from tests.support.text import IMAGE, open_clip_siglip_folder

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

TOLERANCE = 1e-5
CONTEXT = 16
LABELS = ["a photo of a cat", "A Photo, of a DOG!!", "sea_waves", "Tom &amp; Jerry", "it\u2019s a dog",
          "a " + "very " * 30 + "long text"]


def open_clip_clean(text):
    """OpenCLIP's `canonicalize` clean-up (ftfy's repairs aside), written out for the reference."""
    text = html.unescape(html.unescape(text.replace("\u2019", "'"))).strip().replace("_", " ")
    return " ".join(text.translate(str.maketrans("", "", string.punctuation)).lower().split())


@pytest.fixture(scope="module", params=[("t5", "safetensors"), ("gemma", "bin")], ids=["siglip", "siglip2"])
def siglip(request, tmp_path_factory):
    tokenizer, kind = request.param
    folder = str(tmp_path_factory.mktemp(f"open_clip_{tokenizer}"))
    model = open_clip_siglip_folder(folder, tokenizer, kind, context=CONTEXT)
    ids = transformers.AutoTokenizer.from_pretrained(folder)(
        [open_clip_clean(t) for t in LABELS], max_length=CONTEXT, padding="max_length", truncation=True,
        return_tensors="pt")["input_ids"]
    images = np.random.default_rng(0).integers(0, 256, (3, IMAGE, IMAGE, 3), dtype=np.uint8)
    pixels = transformers.SiglipImageProcessor(size={"height": IMAGE, "width": IMAGE})(
        list(images), return_tensors="pt")["pixel_values"]
    with torch.no_grad():
        out = model(input_ids=ids, pixel_values=pixels)
        image, text = model.get_image_features(pixel_values=pixels), model.get_text_features(input_ids=ids)
    image, text = (getattr(f, "pooler_output", f).numpy() for f in (image, text))
    return folder, images, ids.numpy(), (image, text, torch.sigmoid(out.logits_per_image).numpy()), kind


def test_open_clip_siglip_matches_transformers(siglip):
    folder, images, ids, (image, text, probabilities), kind = siglip
    name = "open_clip_model.safetensors" if kind == "safetensors" else "open_clip_pytorch_model.bin"
    model = keras_vit.ImageTextModel.from_checkpoint(os.path.join(folder, name))
    assert model.family == "siglip" and model.logit_bias is not None
    np.testing.assert_array_equal(model.tokenizer(LABELS), ids)
    np.testing.assert_allclose(model.encode_text(LABELS), text, atol=TOLERANCE, rtol=0)
    np.testing.assert_allclose(model.encode_image(images), image, atol=TOLERANCE, rtol=0)
    np.testing.assert_allclose(model.zero_shot(images, LABELS), probabilities, atol=TOLERANCE, rtol=0)


@pytest.mark.backend_independent
def test_open_clip_siglip_tokenizer_and_save_round_trip(siglip, tmp_path):
    """The tokenizer alone (no Keras model run), and `save`'s folder keeps its clean-up rule."""
    folder, _, ids, _, kind = siglip
    tokenizer = keras_vit.text.tokenizer_from_folder(folder, "hf", CONTEXT, clean="open_clip_canonicalize")
    np.testing.assert_array_equal(tokenizer(LABELS), ids)
    if kind != "safetensors":
        return
    model = keras_vit.ImageTextModel.from_checkpoint(folder)
    model.save(str(tmp_path / "saved"))
    loaded = keras_vit.ImageTextModel.from_checkpoint(str(tmp_path / "saved"))
    assert loaded.tokenizer.clean_rule == "open_clip_canonicalize" and loaded.logit_bias == model.logit_bias
    np.testing.assert_array_equal(loaded.tokenizer(LABELS), ids)


def _edited(folder, tmp_path, edit):
    copy = str(tmp_path / "edited")
    shutil.copytree(folder, copy)
    path = os.path.join(copy, "open_clip_config.json")
    with open(path, encoding="utf-8") as handle:
        config = json.load(handle)
    edit(config["model_cfg"])
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(config, handle)
    return copy


@pytest.mark.backend_independent
@pytest.mark.parametrize("edit, message", [
    (lambda m: m["text_cfg"].update(pool_type="first"), r"'pool_type': 'first'.*keras_vit reads OpenCLIP's text"),
    (lambda m: m["text_cfg"].update(tokenizer_kwargs={"clean": "shout"}), r"tokenizer_kwargs"),
    (lambda m: m["text_cfg"].update(embed_cls=True), r"'embed_cls': True"),
    (lambda m: m["vision_cfg"].update(timm_pool="rot_attn"), r"timm_pool='rot_attn'.*keras_vit reads timm_pool"),
])
def test_bad_open_clip_siglip_configs_are_refused_in_one_line(siglip, tmp_path, edit, message):
    folder, _, _, _, kind = siglip
    if kind != "safetensors":
        pytest.skip("one layout is enough")
    with pytest.raises(ValueError, match=message) as error:
        keras_vit.ImageTextModel.from_checkpoint(_edited(folder, tmp_path, edit))
    assert "\n" not in str(error.value)


@pytest.mark.backend_independent
def test_open_clip_siglip_without_tokenizer_files_is_refused(siglip, tmp_path):
    folder, _, _, _, kind = siglip
    if kind != "safetensors":
        pytest.skip("one layout is enough")
    bare = str(tmp_path / "bare")
    os.makedirs(bare)
    for name in ("open_clip_model.safetensors", "open_clip_config.json"):
        shutil.copy(os.path.join(folder, name), bare)
    with pytest.raises(ValueError, match="names no eos_token / pad_token"):
        keras_vit.ImageTextModel.from_checkpoint(bare)
