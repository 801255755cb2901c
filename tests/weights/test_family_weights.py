"""Named weights of the families beyond the paper and their preprocessing: the registry's
entries, the model a named entry builds (it takes the entry's mean / std / crop), and the
places that read it: `preprocess_input`, the input guard, `predict`, saving, and the image
processors of the Hugging Face and KerasHub exports, run by transformers / keras-hub."""

import json
import os
import warnings

import keras
import numpy as np
import pytest
from PIL import Image

import keras_vit
from keras_vit.model.architecture import ViTConfig
from keras_vit.families import FAMILIES
from keras_vit.model.vision_transformer_model import InputRangeWarning
from keras_vit.inference.predict import predict
from keras_vit.preprocessing import IMAGENET_MEAN, IMAGENET_STD, PREPROCESSING
from keras_vit.variants import VARIANTS
from keras_vit.weights import WeightsEntry, registry
from tests.support.checkpoints import TINY, TINY_IMAGE, original_npz_params

RNG = np.random.default_rng(0)
PIXELS = np.clip(RNG.normal([124, 116, 104], 60, (16, TINY_IMAGE, TINY_IMAGE, 3)), 0, 255).round().astype("float32")


def test_family_entries_name_their_model_and_preprocessing():
    family = [e for e in registry.entries() if (e.variant in FAMILIES or e.name.startswith("deit"))
              and e not in registry.DENSE]  # the dense checkpoints' licences: tests/dense/test_named.py
    assert {e.variant for e in family} == {*FAMILIES, "ViTTi16", "ViTS16", "ViTB16"}
    for e in family:
        args = {**VARIANTS, **FAMILIES}[e.variant]
        license = next((name for prefix, name in (("DINOv3", "dinov3-license"), ("AIMv2", "apple-amlr"),
                                                    ("EVA02", "mit"), (".dfn", "apple-ascl"), (".metaclip", "cc-by-nc-4.0"),
                                                    ("CLIP", "mit"))
                        if e.variant.startswith(prefix) or prefix in e.name), "apache-2.0")
        assert e.resolution % args["patch_size"] == 0 and e.preprocessing in PREPROCESSING and e.license == license
        assert e.url.startswith("https://huggingface.co/") and e.url.endswith("/resolve/main/model.safetensors")
    assert registry.find("imagenet", "DeiTB16").name == "deit_base_distilled_patch16_224.fb_in1k"
    assert registry.find("imagenet", "ViTB16").name == "augreg_in21k_ft_in1k_224"  # unchanged
    deit = registry.find("deit_base_patch16_224.fb_in1k")  # DeiT's plain B/16: ViT-B/16's shapes
    assert (deit.variant, deit.preprocessing) == ("ViTB16", "deit")
    reg4 = registry.find("DINOv2B14/vit_base_patch14_reg4_dinov2.lvd142m")
    assert (reg4.resolution, reg4.classes, reg4.preprocessing) == (518, None, "dinov2")
    dinov3 = registry.find("vit_large_patch16_dinov3_qkvb.sat493m")
    assert (dinov3.variant, dinov3.preprocessing, dinov3.license) == ("DINOv3L16", "dinov3", "dinov3-license")
    eva02 = registry.find("eva02_large_patch14_448.mim_m38m_ft_in22k_in1k")
    assert (eva02.variant, eva02.resolution, eva02.preprocessing, eva02.license) == ("EVA02L14", 448, "eva02", "mit")
    assert registry.find("vit_base_patch16_rope_mixed_ape_224.naver_in1k").variant == "RoPEMixedAPEViTB16"
    siglip = registry.find("siglip-so400m-patch14-384")
    assert (siglip.variant, siglip.resolution, siglip.preprocessing) == ("SigLIPSo400m14", 378, "siglip")
    assert siglip.url == "https://huggingface.co/google/siglip-so400m-patch14-384/resolve/main/model.safetensors"
    giant = registry.find("siglip2-giant-opt-patch16-384")
    assert (giant.variant, giant.resolution, giant.preprocessing) == ("SigLIPG16", 384, "siglip2")
    assert registry.find("google/siglip2-so400m-patch14-384").variant == "SigLIPSo400m14"
    aimv2 = registry.find("apple/aimv2-1B-patch14-448")
    assert (aimv2.variant, aimv2.resolution, aimv2.preprocessing, aimv2.license) == ("AIMv21B14", 448, "aimv2", "apple-amlr")
    assert registry.find("aimv2-large-patch14-native").variant == "AIMv2L14Native"
    assert "DeiTB16" in registry.weights_table("DeiTB16") and " deit " in registry.weights_table("DeiTB16")
    clip = registry.find("vit_large_patch14_clip_336.openai")
    assert (clip.variant, clip.resolution, clip.preprocessing, clip.license, clip.quick_gelu) == (
        "CLIPL14", 336, "clip", "mit", True)
    assert registry.find("CLIPBigG14/vit_gigantic_patch14_clip_224.laion2b").quick_gelu is False
    assert {e.variant for e in registry.entries() if e.variant.startswith("CLIP")} == {
        "CLIPB32", "CLIPB16", "CLIPL14", "CLIPH14", "CLIPBigG14"}


def test_variant_of_tells_the_families_apart():
    def config(args):
        return ViTConfig(**{k: v for k, v in args.items() if k not in ("input_size", "include_top")})

    assert registry.variant_of(config(VARIANTS["ViTB16"])) == "ViTB16"
    for name, args in FAMILIES.items():
        assert registry.variant_of(config(args)) == name
    assert registry.variant_of(config({**FAMILIES["DINOv2B14"], "num_registers": 4})) == "DINOv2B14"
    assert registry.variant_of(config({**VARIANTS["ViTB16"], "layer_scale_init": 1e-5})) is None


def test_preprocess_input_scales_by_each_family():
    for name, spec in PREPROCESSING.items():
        expected = (PIXELS / 255 - np.asarray(spec.mean)) / np.asarray(spec.std)
        np.testing.assert_allclose(keras_vit.preprocess_input(PIXELS, preprocessing=name), expected, atol=1e-5)
        tensor = keras_vit.preprocess_input(keras.ops.convert_to_tensor(PIXELS), preprocessing=name)
        np.testing.assert_allclose(keras.ops.convert_to_numpy(tensor), expected, atol=1e-5)
    np.testing.assert_array_equal(keras_vit.preprocess_input(PIXELS), (PIXELS - 127.5) / 127.5)
    with pytest.raises(ValueError, match="Unknown preprocessing='imagenet'; expected one of \\('vit', 'deit'"):
        keras_vit.preprocess_input(PIXELS, preprocessing="imagenet")


@pytest.fixture
def deit_named(monkeypatch, rng):
    """A tiny named checkpoint with DeiT's preprocessing, in the cache (no download)."""
    monkeypatch.setitem(VARIANTS, "ViTTest", dict(TINY))
    entry = WeightsEntry("ViTTest", "tiny_deit", TINY_IMAGE, 5, None, "npz", "https://example.invalid/tiny.npz",
                         preprocessing="deit")
    monkeypatch.setattr(registry, "ENTRIES", [entry])
    os.makedirs(os.path.dirname(registry.cache_path(entry)))
    np.savez(registry.cache_path(entry), **original_npz_params(rng, **TINY, classes=5))
    return keras_vit.VisionTransformer(**TINY, weights="tiny_deit", classes=5, classifier_activation=None,
                                       approximate_gelu=False)


def test_named_weights_give_the_model_their_preprocessing(deit_named, tmp_path):
    assert deit_named.preprocessing == "deit"
    assert keras_vit.VisionTransformer(**TINY, weights="tiny_deit", preprocessing="siglip").preprocessing == "siglip"
    assert keras_vit.VisionTransformer(**TINY).preprocessing == "vit"
    assert keras_vit.DeiTTi16(weights=None, depth=1, input_shape=(32, 32, 3)).preprocessing == "deit"
    path = str(tmp_path / "deit.keras")
    deit_named.save(path)
    assert keras.saving.load_model(path).preprocessing == "deit"
    with pytest.raises(ValueError, match="Unknown preprocessing='nope'"):
        keras_vit.VisionTransformer(**TINY, preprocessing="nope")


def test_a_model_trained_by_the_input_pipeline_records_its_scaling(deit_named):
    from keras_vit.training.engine import build_vit
    from keras_vit.training.recipes import recipe

    config = recipe("digits", **TINY, image_size=TINY_IMAGE, weights="tiny_deit")
    assert build_vit(config, include_top=True, classes=5).preprocessing == "vit"  # [-1, 1], as it is fed


def test_guard_judges_the_inputs_by_the_models_preprocessing(deit_named):
    with warnings.catch_warnings():
        warnings.simplefilter("error", InputRangeWarning)
        deit_named.predict(keras_vit.preprocess_input(PIXELS, preprocessing=deit_named), verbose=0)
    deit_named._inputs_checked = False
    with pytest.warns(InputRangeWarning, match="expects RGB scaled as its 'deit' weights.*like 0-255 pixels"):
        deit_named.predict(PIXELS, verbose=0)


def test_predict_scales_and_crops_image_files_by_the_models_preprocessing(deit_named, tmp_path):
    paths = []
    for i, image in enumerate(PIXELS[:3].astype(np.uint8)):
        paths.append(str(tmp_path / f"{i}.png"))
        Image.fromarray(image).save(paths[-1])
    crop = PREPROCESSING["deit"].crop_fraction
    from keras_vit.data import images

    batch = np.stack([images.center_crop(images.read_image(p), TINY_IMAGE, crop, "bicubic") for p in paths])
    logits = keras.ops.convert_to_numpy(deit_named(keras_vit.preprocess_input(batch, preprocessing="deit")))
    expected = keras.ops.convert_to_numpy(keras.ops.softmax(logits))
    for row, best in zip(expected, predict(deit_named, paths, top=5, crop_fraction=crop)):
        np.testing.assert_allclose([p for _, _, p in best], np.sort(row)[::-1], atol=1e-5)


def test_hf_export_carries_the_preprocessing_transformers_applies(deit_named, tmp_path):
    transformers = pytest.importorskip("transformers")
    folder = str(tmp_path / "hf")
    keras_vit.weights.export(deit_named, folder, format="hf")
    config = json.load(open(os.path.join(folder, "preprocessor_config.json")))
    assert (config["image_mean"], config["image_std"], config["resample"]) == (list(IMAGENET_MEAN), list(IMAGENET_STD), 3)
    processor = transformers.AutoImageProcessor.from_pretrained(folder)
    theirs = processor(list(PIXELS[:4].astype(np.uint8)), return_tensors="np")["pixel_values"].transpose(0, 2, 3, 1)
    np.testing.assert_allclose(keras_vit.preprocess_input(PIXELS[:4], preprocessing=deit_named), theirs, atol=1e-5)


def test_kerashub_export_carries_the_preprocessing_keras_hub_applies(deit_named, tmp_path):
    pytest.importorskip("keras_hub")
    folder = str(tmp_path / "kerashub")
    keras_vit.weights.export(deit_named, folder, format="kerashub")
    converter = keras.saving.deserialize_keras_object(json.load(open(os.path.join(folder, "image_converter.json"))))
    assert converter.resizing.interpolation == "bicubic"
    theirs = keras.ops.convert_to_numpy(converter(PIXELS[:4]))
    np.testing.assert_allclose(keras_vit.preprocess_input(PIXELS[:4], preprocessing=deit_named), theirs, atol=1e-5)
