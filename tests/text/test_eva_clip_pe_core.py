"""EVA-CLIP (timm `eva02_*_clip_*`, OpenCLIP's `EVA02-*`) and Perception Encoder core (timm `vit_pe_core_*`,
OpenCLIP's `PE-Core-*`): random-weight files in the real layouts, written here (timm's image tower state dict;
OpenCLIP's `CustomTextCLIP` file: the timm tower under `visual.trunk.`, OpenCLIP's text transformer under
`text.`, `logit_scale`). The image towers are checked against independent torch references of timm's `Eva`
(`tests/support/timm_rope_vit.py`: `eva02_forward` with the attention's inner norm, the class token and the
biased projection; `pe_forward`: the offset rotary grid, the pre-norm, the 8-head attention pool), the text
tower against transformers' `CLIPTextModelWithProjection` (the same weights in its layout), zero-shot
probabilities against the softmax of `exp(logit_scale)` times those features' cosines, end to end from uint8
images and strings."""

import json
import os

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.config.vit_config import ViTConfig
from keras_vit.weights.containers import write_safetensors
from tests.support import one_of_the_others, timm_rope_vit as reference
from tests.support.text import IMAGE, TIMM_TOWERS, timm_clip_folder

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

TOLERANCE = 1e-5
HEADS = 2
LABELS = ["a photo of a cat", "A Photo, of a DOG!!", "two dogs", "a " + "very " * 80 + "long text"]
FORWARD = {"eva": reference.eva02_forward, "pe": reference.pe_forward}
MUTATIONS = {"eva": (dict(attn_norm=False),), "pe": (dict(offset=0.0), dict(pool_heads=HEADS), dict(pre_norm=False))}


def _softmax(logits):
    out = np.exp(logits - logits.max(-1, keepdims=True))
    return out / out.sum(-1, keepdims=True)


@pytest.fixture(scope="module", params=[("eva", "safetensors"), ("eva", "bin"), ("pe", "safetensors")],
                ids=["eva_safetensors", "eva_bin", "pe_safetensors"])
def pair(request, tmp_path_factory):
    tower, kind = request.param
    folder = str(tmp_path_factory.mktemp(f"{tower}_{kind}"))
    text_model, trunk, scale = timm_clip_folder(folder, np.random.default_rng(0), tower, kind)
    _, _, context, mean, std = TIMM_TOWERS[tower]
    images = np.random.default_rng(1).integers(0, 256, (3, IMAGE, IMAGE + 8, 3), dtype=np.uint8)
    ids = transformers.CLIPTokenizer.from_pretrained(folder)(LABELS, padding="max_length", max_length=context,
                                                             truncation=True, return_tensors="pt")["input_ids"]
    pixels = transformers.CLIPImageProcessor(  # OpenCLIP's evaluation transform: short side, centre square, mean / std
        size={"shortest_edge": IMAGE}, crop_size={"height": IMAGE, "width": IMAGE}, image_mean=mean, image_std=std)(
        list(images), return_tensors="pt")["pixel_values"]
    with torch.no_grad():
        text = text_model(input_ids=ids).text_embeds.numpy()
    image = FORWARD[tower](trunk, pixels, HEADS).numpy()
    unit = [f / np.linalg.norm(f, axis=-1, keepdims=True) for f in (image, text)]
    probabilities = _softmax(np.exp(scale) * unit[0] @ unit[1].T)
    return tower, kind, folder, trunk, images, (image, text, probabilities)


def test_features_and_probabilities_match_the_references(pair):
    tower, kind, folder, _, images, (image, text, probabilities) = pair
    name = "open_clip_model.safetensors" if kind == "safetensors" else "open_clip_pytorch_model.bin"
    model = keras_vit.ImageTextModel.from_checkpoint(os.path.join(folder, name))
    assert model.family == "clip" and model.processing.shortest_edge == IMAGE
    np.testing.assert_allclose(model.encode_text(LABELS), text, atol=TOLERANCE, rtol=0)
    np.testing.assert_allclose(model.encode_image(images), image, atol=TOLERANCE, rtol=0)
    np.testing.assert_allclose(model.zero_shot(images, LABELS), probabilities, atol=TOLERANCE, rtol=0)


def test_the_image_tower_alone_reads_from_timm_and_open_clip_files_at_two_sizes(pair, tmp_path):
    tower, kind, folder, trunk, _, _ = pair
    if kind != "safetensors":
        pytest.skip("one layout is enough")
    timm_file = str(tmp_path / "model.safetensors")
    write_safetensors(timm_file, trunk, {"format": "pt"})
    rng = np.random.default_rng(2)
    for source in (timm_file, folder):
        model = keras_vit.from_checkpoint(source, num_heads=HEADS, input_shape=(None, None, 3))
        assert model.preprocessing == ("clip" if tower == "eva" else "siglip") and model.output_shape == (None, 24)
        for size in one_of_the_others(((IMAGE, IMAGE), (24, 40), (40, 16))):
            image = torch.from_numpy(rng.uniform(-2, 2, (2, 3, *size)).astype("float32"))
            expected = FORWARD[tower](trunk, image, HEADS).numpy()
            got = keras.ops.convert_to_numpy(model(np.transpose(image.numpy(), (0, 2, 3, 1))))
            np.testing.assert_allclose(got, expected, atol=TOLERANCE, rtol=0)
    for mutation in MUTATIONS[tower]:
        assert np.abs(FORWARD[tower](trunk, image, HEADS, **mutation).numpy() - expected).max() > 1e-3, mutation
    if tower == "eva":  # the projection's bias
        unbiased = {**trunk, "head.bias": np.zeros_like(trunk["head.bias"])}
        assert np.abs(FORWARD[tower](unbiased, image, HEADS).numpy() - expected).max() > 1e-3


def test_a_saved_tower_and_pair_read_back_and_the_zero_shot_classifier(pair, tmp_path):
    _, kind, folder, _, images, (image, _, probabilities) = pair
    if kind != "safetensors":
        pytest.skip("one layout is enough")
    model = keras_vit.ImageTextModel.from_checkpoint(folder)
    model.image_model.save(str(tmp_path / "tower.keras"))
    again = keras_vit.from_checkpoint(str(tmp_path / "tower.keras"))
    np.testing.assert_allclose(again.predict(model.image_inputs(images), verbose=0), image, atol=TOLERANCE, rtol=0)
    model.save(str(tmp_path / "pair"))
    pair_again = keras_vit.ImageTextModel.from_checkpoint(str(tmp_path / "pair"))
    np.testing.assert_allclose(pair_again.zero_shot(images, LABELS), probabilities, atol=TOLERANCE, rtol=0)
    classifier = model.classifier(LABELS)  # the zero-shot head on the tower: the same probabilities
    np.testing.assert_allclose(classifier.predict(model.image_inputs(images), verbose=0), probabilities,
                               atol=TOLERANCE, rtol=0)


@pytest.mark.backend_independent
def test_other_open_clip_timm_heads_bad_options_and_writers_are_refused_in_one_line(pair, tmp_path):
    tower, kind, folder, _, _, _ = pair
    if kind != "safetensors":
        pytest.skip("one layout is enough")
    config = json.load(open(os.path.join(folder, "open_clip_config.json"), encoding="utf-8"))
    config["model_cfg"]["vision_cfg"]["timm_proj"] = "linear"
    edited = tmp_path / "linear"
    edited.mkdir()
    os.symlink(os.path.join(folder, "open_clip_model.safetensors"), edited / "open_clip_model.safetensors")
    (edited / "open_clip_config.json").write_text(json.dumps(config), encoding="utf-8")
    with pytest.raises(ValueError, match="timm_proj='linear'.*keras_vit reads") as error:
        keras_vit.from_checkpoint(str(edited))
    assert "\n" not in str(error.value)
    with pytest.raises(ValueError, match=r"cannot be written as timm\b") as error:
        keras_vit.weights.convert_checkpoint(folder, str(tmp_path / "out.safetensors"), format="timm")
    assert "\n" not in str(error.value) and not os.path.exists(tmp_path / "out.safetensors")
    for options, message in ((dict(projection_bias=True), "projection_bias=True .* needs projection_dim"),
                             (dict(rope_offset=1.0), "rope_offset shifts the axial form's indices")):
        with pytest.raises(ValueError, match=message):
            ViTConfig(**options)


@pytest.mark.backend_independent
def test_named_models_have_timm_s_numbers_and_entries():
    """The named models' numbers are timm's definitions' (their parameter counts are checked against timm's key
    shapes in tests/applications/test_families_builders.py), each told apart and with its licence."""
    from keras_vit.families import FAMILIES
    from keras_vit.weights import registry

    numbers = {"EVA02CLIPB16": (16, 768, 12, 12, 2048, 512), "EVA02CLIPL14": (14, 1024, 24, 16, 2730, 768), "PECoreT16": (16, 192, 12, 3, 768, 512),
               "PECoreS16": (16, 384, 12, 6, 1536, 512), "PECoreB16": (16, 768, 12, 12, 3072, 1024),
               "PECoreL14": (14, 1024, 24, 16, 4096, 1024)}
    for variant, expected in numbers.items():
        config = ViTConfig(**{k: v for k, v in FAMILIES[variant].items() if k != "input_size"})
        assert (config.patch_size, config.hidden_dim, config.depth, config.num_heads, config.mlp_dim,
                config.projection_dim) == expected, variant
    for variant, licence in (("EVA02CLIPB16", "mit"), ("EVA02CLIPL14", "mit"), ("PECoreT16", "apache-2.0"),
                             ("PECoreS16", "apache-2.0"), ("PECoreB16", "apache-2.0"), ("PECoreL14", "apache-2.0")):
        config = ViTConfig(**{k: v for k, v in FAMILIES[variant].items() if k != "input_size"})
        assert registry.variant_of(config) == variant
        assert {e.license for e in registry.entries(variant)} == {licence}
