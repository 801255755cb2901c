"""`keras_vit.ImageTextModel` and the text towers against transformers: random-weight SigLIP
(SentencePiece), SigLIP 2 fixed resolution (a `SiglipModel` with Gemma's tokenizer) and CLIP's text
tower, end to end from uint8 images and strings; the tokenizers' ids against transformers'."""

import json
import os

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.text import image_processing
from keras_vit.text.tokenizers import canonicalize
from tests.support.text import IMAGE, clip_folder, siglip2_folder, siglip_folder

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

TOLERANCE = 1e-5
LABELS = ["a photo of a cat", "A Photo, of a DOG!!", "  two   dogs\tplaying ", "a " + "very " * 80 + "long text",
          "zebra's stripes; 42"]


def _images(count=3, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (count, IMAGE, IMAGE, 3), dtype=np.uint8)


def _reference(folder, model, texts, images, clean=False, tokenizer_class="AutoTokenizer"):
    """transformers' image features, text features and `logits_per_image` for uint8 `images` and
    `texts` (through its own tokenizer and image processor loaded from `folder`; `clean`: the texts
    canonicalised first, what SigLIP 2's transformers tokenizer leaves out)."""
    tokenizer = getattr(transformers, tokenizer_class).from_pretrained(folder)
    texts = [canonicalize(t) for t in texts] if clean else texts
    length = model.config.text_config.max_position_embeddings
    ids = tokenizer(texts, padding="max_length", max_length=length, truncation=True, return_tensors="pt")["input_ids"]
    pixels = transformers.AutoImageProcessor.from_pretrained(folder)(list(images), return_tensors="pt")["pixel_values"]
    with torch.no_grad():
        out = model(input_ids=ids, pixel_values=pixels)
        image = model.get_image_features(pixel_values=pixels)
        text = model.get_text_features(input_ids=ids)
    pooled = [getattr(f, "pooler_output", f).numpy() for f in (image, text)]
    return dict(ids=ids.numpy(), image=pooled[0], text=pooled[1], logits=out.logits_per_image.numpy())


@pytest.fixture(scope="module", params=["spiece", "gemma"], ids=["siglip", "siglip2_fixres"])
def siglip(request, tmp_path_factory):
    folder = str(tmp_path_factory.mktemp(request.param))
    model = siglip_folder(folder, request.param)
    reference = _reference(folder, model, LABELS, _images(), clean=request.param == "gemma")
    return folder, keras_vit.ImageTextModel.from_checkpoint(folder), reference


def test_siglip_features_and_probabilities_match_transformers(siglip):
    folder, model, reference = siglip
    np.testing.assert_array_equal(model.tokenizer(LABELS), reference["ids"])
    np.testing.assert_allclose(model.encode_image(_images()), reference["image"], atol=TOLERANCE, rtol=0)
    np.testing.assert_allclose(model.encode_text(LABELS), reference["text"], atol=TOLERANCE, rtol=0)
    probabilities = model.zero_shot(list(_images()), LABELS)
    expected = 1 / (1 + np.exp(-reference["logits"]))
    assert probabilities.shape == (3, len(LABELS))
    np.testing.assert_allclose(probabilities, expected, atol=TOLERANCE, rtol=0)


def test_zero_shot_classifier_gives_zero_shots_probabilities(siglip, tmp_path):
    _, model, _ = siglip
    classifier = model.classifier(["cat", "dog", "car"], template="a photo of a {}")
    expected = model.zero_shot(_images(), ["cat", "dog", "car"], template="a photo of a {}")
    inputs = model.image_inputs(_images())
    np.testing.assert_allclose(keras.ops.convert_to_numpy(classifier(inputs)), expected, atol=1e-5, rtol=0)
    classifier.save(tmp_path / "classifier.keras")
    again = keras.saving.load_model(tmp_path / "classifier.keras")
    np.testing.assert_allclose(keras.ops.convert_to_numpy(again(inputs)), expected, atol=1e-5, rtol=0)


def test_the_text_clean_up_is_applied(siglip):
    _, model, _ = siglip
    ids = model.tokenizer(["a photo of a cat", "A Photo, of a CAT!!", "a photo of a dog"])
    np.testing.assert_array_equal(ids[0], ids[1])  # lower case, punctuation and spaces cleaned
    assert (ids[0] != ids[2]).any()
    row = model.tokenizer(["a " + "very " * 80 + "long text"])[0]
    assert row[-1] == model.tokenizer.eos_id and len(row) == 64  # cut, its end-of-text kept


def test_image_files_and_template(siglip, tmp_path):
    from PIL import Image

    _, model, _ = siglip
    paths = []
    for i, image in enumerate(_images()):
        paths.append(str(tmp_path / f"{i}.png"))
        Image.fromarray(image).save(paths[-1])
    np.testing.assert_allclose(model.encode_image(paths), model.encode_image(_images()), atol=1e-6, rtol=0)
    np.testing.assert_allclose(model.zero_shot(paths, ["cat", "dog"], template="a photo of a {}"),
                               model.zero_shot(_images(), ["a photo of a cat", "a photo of a dog"]), atol=1e-6, rtol=0)


def test_other_sizes_are_resized_as_the_image_processor_does(siglip):
    folder, model, _ = siglip
    images = np.random.default_rng(1).integers(0, 256, (2, 45, 60, 3), dtype=np.uint8)
    theirs = transformers.AutoImageProcessor.from_pretrained(folder)(list(images), return_tensors="np")["pixel_values"]
    ours = model.image_inputs(list(images))
    assert ours.shape == (2, IMAGE, IMAGE, 3)
    # Pillow rounds (and clips) each pass of its resize to 0-255 integers, keras_vit keeps float32
    difference = np.abs(ours - theirs.transpose(0, 2, 3, 1))
    assert difference.mean() < 1 / 127.5 and difference.max() < 6 / 127.5


def test_save_and_load_round_trip(siglip, tmp_path):
    _, model, _ = siglip
    model.save(tmp_path / "saved")
    assert isinstance(keras.saving.load_model(tmp_path / "saved" / "text_model.keras"), keras.Model)
    loaded = keras_vit.ImageTextModel.from_checkpoint(tmp_path / "saved")
    np.testing.assert_allclose(loaded.zero_shot(_images(), LABELS), model.zero_shot(_images(), LABELS), atol=1e-6)
    with pytest.raises(FileExistsError, match="exists"):
        model.save(tmp_path / "saved")


@pytest.mark.parametrize("eos_token_id", [1, 2], ids=["eos", "legacy_argmax"])
def test_clip_text_tower_matches_transformers(tmp_path, eos_token_id):
    folder = str(tmp_path)
    model = clip_folder(folder, text_only=True)
    if eos_token_id == 2:  # configs before transformers#24773 pool at the largest id
        config = json.load(open(os.path.join(folder, "config.json")))
        json.dump(dict(config, eos_token_id=2), open(os.path.join(folder, "config.json"), "w"))
        model = transformers.CLIPTextModelWithProjection.from_pretrained(folder).eval()
    ids = transformers.CLIPTokenizer.from_pretrained(folder)(
        LABELS, padding="max_length", max_length=77, truncation=True, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        expected = model(input_ids=ids).text_embeds.numpy()
    text_model, tokenizer, _ = keras_vit.text.text_from_checkpoint(folder)
    np.testing.assert_array_equal(tokenizer(LABELS), ids.numpy())
    assert text_model.get_layer("pooling").pooling == ("argmax" if eos_token_id == 2 else "eos")
    np.testing.assert_allclose(keras.ops.convert_to_numpy(text_model(tokenizer(LABELS))), expected,
                               atol=TOLERANCE, rtol=0)
    # the same vocabulary as tokenizer.json alone (as the hub's CLIP folders ship it)
    transformers.CLIPTokenizer.from_pretrained(folder).save_pretrained(tmp_path / "fast")
    for name in ("vocab.json", "merges.txt"):
        if (tmp_path / "fast" / name).exists():
            os.remove(tmp_path / "fast" / name)
    assert (tmp_path / "fast" / "tokenizer.json").is_file()
    fast = keras_vit.text.tokenizer_from_folder(str(tmp_path / "fast"), "clip", 77, model.config.vocab_size)
    np.testing.assert_array_equal(fast(LABELS), ids.numpy())


def test_clip_zero_shot_matches_transformers(tmp_path):
    folder = str(tmp_path)
    model = clip_folder(folder)
    try:
        keras_vit.from_checkpoint(folder)
    except ValueError as error:
        pytest.skip(f"keras_vit.from_checkpoint does not read CLIPModel image towers yet ({error})")
    reference = _reference(folder, model, LABELS, _images(), tokenizer_class="CLIPTokenizer")
    ours = keras_vit.ImageTextModel.from_checkpoint(folder)
    np.testing.assert_allclose(ours.encode_image(_images()), reference["image"], atol=TOLERANCE, rtol=0)
    np.testing.assert_allclose(ours.encode_text(LABELS), reference["text"], atol=TOLERANCE, rtol=0)
    logits = reference["logits"] - reference["logits"].max(-1, keepdims=True)
    expected = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    np.testing.assert_allclose(ours.zero_shot(_images(), LABELS), expected, atol=TOLERANCE, rtol=0)


def test_bad_inputs_are_refused_in_one_line(siglip, tmp_path):
    folder, model, _ = siglip
    for labels, match in (([], "non-empty list"), (["cat", ""], "not a non-empty string"),
                          (["cat", 3], "not a non-empty string")):
        with pytest.raises(ValueError, match=match):
            model.zero_shot(_images(), labels)
    with pytest.raises(ValueError, match=r"with \{\}"):
        model.zero_shot(_images(), ["cat"], template="a photo")
    with pytest.raises(FileNotFoundError, match="No image file"):
        model.encode_image([str(tmp_path / "missing.png")])
    with pytest.raises(ValueError, match=r"expected \(height, width, 3\)"):
        model.encode_image([np.zeros((4, 4), np.uint8)])


def test_folders_without_a_text_tower_or_a_fitting_tokenizer_are_refused(siglip, tmp_path):
    folder, _, _ = siglip
    vision = transformers.SiglipVisionModel(transformers.SiglipVisionConfig(**json.load(
        open(os.path.join(folder, "config.json")))["vision_config"]))
    vision.save_pretrained(tmp_path / "vision")
    with pytest.raises(ValueError, match="keras_vit.from_checkpoint") as error:
        keras_vit.ImageTextModel.from_checkpoint(tmp_path / "vision")
    assert "\n" not in str(error.value)
    config = json.load(open(os.path.join(folder, "config.json")))
    small = transformers.SiglipModel(transformers.SiglipConfig(
        text_config=dict(config["text_config"], vocab_size=8), vision_config=config["vision_config"]))
    small.save_pretrained(tmp_path / "small")
    for name in os.listdir(folder):
        if name.startswith(("tokenizer", "spiece", "special")):
            os.link(os.path.join(folder, name), tmp_path / "small" / name)
    with pytest.raises(ValueError, match="does not fit the text tower's embedding table of 8 rows"):
        keras_vit.ImageTextModel.from_checkpoint(tmp_path / "small")


def test_a_text_config_declaring_another_block_count_than_its_tensors_is_refused(siglip, tmp_path):
    folder = siglip[0]
    depth = json.load(open(os.path.join(folder, "config.json")))["text_config"]["num_hidden_layers"]
    for declared in (depth + 1, depth - 1):
        copy = tmp_path / str(declared)
        copy.mkdir()
        for name in os.listdir(folder):
            os.link(os.path.join(folder, name), copy / name)
        config = json.load(open(os.path.join(folder, "config.json")))
        config["text_config"]["num_hidden_layers"] = declared
        os.unlink(copy / "config.json")
        (copy / "config.json").write_text(json.dumps(config))
        with pytest.raises(ValueError, match=f"declares {declared} text blocks but its tensors hold {depth}") as error:
            keras_vit.ImageTextModel.from_checkpoint(copy)
        assert "\n" not in str(error.value)


def test_image_processing_reads_the_preprocessor_config():
    clip = image_processing.from_preprocessor_config(
        {"size": {"shortest_edge": 224}, "crop_size": {"height": 224, "width": 224}, "do_center_crop": True,
         "resample": 3, "image_mean": [0.48, 0.45, 0.4], "image_std": [0.26, 0.26, 0.27]})
    assert (clip.shortest_edge, clip.crop, clip.interpolation, clip.size) == (224, 224, "bicubic", None)
    assert image_processing.resized(clip, np.zeros((300, 400, 3), np.uint8)).shape == (224, 224, 3)
    with pytest.raises(ValueError, match="resample=0"):
        image_processing.from_preprocessor_config({"resample": 0})
    vit = keras_vit.VisionTransformer(patch_size=8, hidden_dim=16, depth=1, num_heads=2, mlp_dim=32,
                                      input_shape=(24, 24, 3), include_top=False, pooling="avg", preprocessing="deit")
    own = image_processing.from_model(vit)  # without preprocessor_config.json
    assert (own.size, own.interpolation, own.mean) == ((24, 24), "bicubic", (0.485, 0.456, 0.406))


def test_naflex_siglip2_matches_transformers(tmp_path):
    """A `Siglip2Model`: its NaFlex image tower through the same calls (images at their budget's
    size, so that no resize differs), its text tower as SigLIP's (no mask: big_vision's)."""
    folder = str(tmp_path)
    model = siglip2_folder(folder)
    images = _images()
    inputs = transformers.Siglip2ImageProcessor.from_pretrained(folder)(list(images), return_tensors="pt")
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    ids = tokenizer([canonicalize(t) for t in LABELS], padding="max_length", max_length=64, truncation=True,
                    return_tensors="pt")["input_ids"]
    with torch.no_grad():
        out = model(input_ids=ids, pixel_values=inputs["pixel_values"], spatial_shapes=inputs["spatial_shapes"],
                    pixel_attention_mask=inputs["pixel_attention_mask"])
    ours = keras_vit.ImageTextModel.from_checkpoint(folder)
    np.testing.assert_array_equal(ours.tokenizer(LABELS), ids.numpy())
    np.testing.assert_allclose(ours.encode_image(images), out.vision_model_output.pooler_output.numpy(),
                               atol=TOLERANCE, rtol=0)
    np.testing.assert_allclose(ours.encode_text(LABELS), out.text_model_output.pooler_output.numpy(),
                               atol=TOLERANCE, rtol=0)
    np.testing.assert_allclose(ours.zero_shot(images, LABELS), torch.sigmoid(out.logits_per_image).numpy(),
                               atol=TOLERANCE, rtol=0)
