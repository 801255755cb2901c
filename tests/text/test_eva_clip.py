"""EVA-CLIP (timm `eva02_*_clip_*`, OpenCLIP's `EVA02-*`): random-weight files in the real layouts, written
here (timm's image tower state dict; OpenCLIP's `CustomTextCLIP` file: the timm tower under `visual.trunk.`,
OpenCLIP's text transformer under `text.`, `logit_scale`). The image tower is checked against an independent
torch reference of timm's `Eva` (`tests/support/timm_rope_vit.py`: EVA-02's formulas plus the attention's
inner norm, the class token and the biased projection), the text tower against transformers'
`CLIPTextModelWithProjection` (the same weights in its layout), zero-shot probabilities against the softmax
of `exp(logit_scale)` times those features' cosines, end to end from uint8 images and strings."""

import json
import math
import os

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.config.vit_config import ViTConfig
from keras_vit.weights.containers import write_safetensors
from tests.support import one_of_the_others, timm_rope_vit as reference
from tests.support.text import IMAGE, eva_clip_folder

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

TOLERANCE = 1e-5
HEADS = 2
LABELS = ["a photo of a cat", "A Photo, of a DOG!!", "two dogs", "a " + "very " * 80 + "long text"]


def _image_reference(trunk, images, folder):
    """timm `Eva` features of `images` prepared by transformers' `CLIPImageProcessor` (OpenCLIP's evaluation
    transform: the short side to 32, the centre square, OpenAI's mean / std)."""
    pixels = transformers.CLIPImageProcessor(size={"shortest_edge": IMAGE}, crop_size={"height": IMAGE, "width": IMAGE})(
        list(images), return_tensors="pt")["pixel_values"]
    return reference.eva02_forward(trunk, pixels, HEADS).numpy()


@pytest.fixture(scope="module", params=["safetensors", "bin"])
def eva_clip(request, tmp_path_factory):
    folder = str(tmp_path_factory.mktemp(f"eva_clip_{request.param}"))
    text_model, trunk, scale = eva_clip_folder(folder, np.random.default_rng(0), request.param)
    images = np.random.default_rng(1).integers(0, 256, (3, IMAGE, IMAGE + 8, 3), dtype=np.uint8)
    ids = transformers.CLIPTokenizer.from_pretrained(folder)(LABELS, padding="max_length", max_length=77,
                                                             truncation=True, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        text = text_model(input_ids=ids).text_embeds.numpy()
    image = _image_reference(trunk, images, folder)
    unit = [f / np.linalg.norm(f, axis=-1, keepdims=True) for f in (image, text)]
    logits = np.exp(scale) * unit[0] @ unit[1].T
    probabilities = np.exp(logits - logits.max(-1, keepdims=True))
    return folder, trunk, images, (image, text, probabilities / probabilities.sum(-1, keepdims=True)), request.param


def test_eva_clip_features_and_probabilities_match_the_references(eva_clip):
    folder, _, images, (image, text, probabilities), kind = eva_clip
    name = "open_clip_model.safetensors" if kind == "safetensors" else "open_clip_pytorch_model.bin"
    model = keras_vit.ImageTextModel.from_checkpoint(os.path.join(folder, name))
    assert model.family == "clip" and model.processing.shortest_edge == IMAGE
    assert model.image_model.get_layer("encoder").blocks[0].attention.out_norm is not None
    np.testing.assert_allclose(model.encode_text(LABELS), text, atol=TOLERANCE, rtol=0)
    np.testing.assert_allclose(model.encode_image(images), image, atol=TOLERANCE, rtol=0)
    np.testing.assert_allclose(model.zero_shot(images, LABELS), probabilities, atol=TOLERANCE, rtol=0)


def test_the_image_tower_alone_reads_from_timm_and_open_clip_files_at_two_sizes(eva_clip, tmp_path):
    folder, trunk, _, _, kind = eva_clip
    if kind != "safetensors":
        pytest.skip("one layout is enough")
    timm_file = str(tmp_path / "model.safetensors")
    write_safetensors(timm_file, trunk, {"format": "pt"})
    rng = np.random.default_rng(2)
    for source in (timm_file, folder):
        model = keras_vit.from_checkpoint(source, num_heads=HEADS, input_shape=(None, None, 3))
        assert model.preprocessing == "clip" and model.output_shape == (None, 24)
        for size in one_of_the_others(((IMAGE, IMAGE), (24, 40), (40, 16))):
            image = rng.uniform(-2, 2, (2, 3, *size)).astype("float32")
            expected = reference.eva02_forward(trunk, torch.from_numpy(image), HEADS).numpy()
            got = keras.ops.convert_to_numpy(model(np.transpose(image, (0, 2, 3, 1))))
            np.testing.assert_allclose(got, expected, atol=TOLERANCE, rtol=0)
    unbiased = {**trunk, "head.bias": np.zeros_like(trunk["head.bias"])}
    for wrong in (reference.eva02_forward(trunk, torch.from_numpy(image), HEADS, attn_norm=False).numpy(),
                  reference.eva02_forward(unbiased, torch.from_numpy(image), HEADS).numpy()):
        assert np.abs(wrong - expected).max() > 1e-3


def test_a_saved_tower_and_pair_read_back(eva_clip, tmp_path):
    folder, _, images, (image, _, probabilities), kind = eva_clip
    if kind != "safetensors":
        pytest.skip("one layout is enough")
    model = keras_vit.ImageTextModel.from_checkpoint(folder)
    model.image_model.save(str(tmp_path / "tower.keras"))
    again = keras_vit.from_checkpoint(str(tmp_path / "tower.keras"))
    np.testing.assert_allclose(again.predict(model.image_inputs(images), verbose=0), image, atol=TOLERANCE, rtol=0)
    model.save(str(tmp_path / "pair"))
    pair = keras_vit.ImageTextModel.from_checkpoint(str(tmp_path / "pair"))
    np.testing.assert_allclose(pair.zero_shot(images, LABELS), probabilities, atol=TOLERANCE, rtol=0)


@pytest.mark.backend_independent
def test_other_open_clip_timm_heads_and_bad_options_are_refused_in_one_line(eva_clip, tmp_path):
    folder, _, _, _, kind = eva_clip
    if kind != "safetensors":
        pytest.skip("one layout is enough")
    config = json.load(open(os.path.join(folder, "open_clip_config.json"), encoding="utf-8"))
    config["model_cfg"]["vision_cfg"]["timm_proj"] = "linear"
    edited = tmp_path / "linear"
    edited.mkdir()
    os.symlink(os.path.join(folder, "open_clip_model.safetensors"), edited / "open_clip_model.safetensors")
    (edited / "open_clip_config.json").write_text(json.dumps(config), encoding="utf-8")
    with pytest.raises(ValueError, match="timm_proj='linear'.*keras_vit reads EVA-CLIP's") as error:
        keras_vit.from_checkpoint(str(edited))
    assert "\n" not in str(error.value)
    with pytest.raises(ValueError, match="projection_bias=True .* needs projection_dim"):
        ViTConfig(projection_bias=True)


@pytest.mark.backend_independent
def test_named_eva_clip_models_have_timm_s_variables_and_entries():
    """EVA02CLIPB16's variables are timm's (`eva02_shapes`) plus the zero key biases keras_vit keeps; L/14's
    numbers are timm's `eva02_large_patch14_clip_224`."""
    from keras_vit.families import FAMILIES
    from keras_vit.weights import registry

    timm = reference.eva02_shapes(768, 12, 12, 2048, patch=16, grid=14, classes=512, clip=True)
    assert keras_vit.EVA02CLIPB16(weights=None).count_params() == sum(map(math.prod, timm.values())) + 12 * 768
    config = ViTConfig(**{k: v for k, v in FAMILIES["EVA02CLIPL14"].items() if k != "input_size"})
    assert (config.patch_size, config.hidden_dim, config.depth, config.num_heads, config.mlp_dim,
            config.projection_dim) == (14, 1024, 24, 16, 2730, 768)
    for variant in ("EVA02CLIPB16", "EVA02CLIPL14"):
        config = ViTConfig(**{k: v for k, v in FAMILIES[variant].items() if k != "input_size"})
        assert registry.variant_of(config) == variant and config.attention_norm and config.projection_bias
        assert {e.license for e in registry.entries(variant)} == {"mit"}
