"""Naver's RoPE-ViT (axial and mixed) from timm `vit_*_patch16_rope[_mixed]_224` state dicts
(key names from timm's `eva.py`), written here from random weights and checked against an
independent torch reference of timm's formulas (`tests/support/timm_rope_vit.py`), at the native
grid and two others; each mutation of the reference (x / y swapped, the class token rotated,
half-split pairs, the `_ape` table left out) is off by far more than the tolerance."""

import os

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.weights.containers import write_safetensors

torch = pytest.importorskip("torch")
from tests.support import one_of_the_others, timm_rope_vit as reference  # noqa: E402
from tests.support.checkpoints import model_of_cached_entry  # noqa: E402

HEADS = 2
SIZES = ((16, 16), (12, 20), (24, 8))  # the native 4 x 4 patches of 4 pixels, two others


def write(tmp_path, sd):
    path = os.path.join(tmp_path, "model.safetensors")
    write_safetensors(path, sd, {"format": "pt"})
    return path


def logits(model, image):
    return keras.ops.convert_to_numpy(model(np.transpose(image, (0, 2, 3, 1))))


@pytest.mark.parametrize("mixed", [False, True], ids=["axial", "mixed"])
def test_loads_and_matches_timm_at_three_sizes(tmp_path, rng, mixed):
    sd = reference.state_dict(rng, mixed=mixed)
    model = keras_vit.from_checkpoint(
        write(tmp_path, sd), num_heads=HEADS, input_shape=(None, None, 3), classifier_activation=None)
    attention = model.get_layer("encoder").blocks[0].attention
    assert attention.rope_form == ("mixed" if mixed else "axial")
    assert model.preprocessing == "deit"
    for size in one_of_the_others(SIZES):  # the three over the suite's three backends
        image = rng.uniform(-1, 1, (2, 3, *size)).astype("float32")
        expected = reference.forward(sd, torch.from_numpy(image), HEADS, mixed=mixed).numpy()
        np.testing.assert_allclose(logits(model, image), expected, atol=1e-5, rtol=1e-5)
        mutations = [dict(prefix_rotated=True), dict(half=True)] + ([] if mixed else [dict(swap_xy=True)])
        for mutation in mutations:
            wrong = reference.forward(sd, torch.from_numpy(image), HEADS, mixed=mixed, **mutation).numpy()
            assert np.abs(wrong - expected).max() > 1e-3, mutation


def test_the_learned_frequencies_are_float32_variables_of_each_block(tmp_path, rng):
    """Under mixed precision too (bfloat16 compute: the logits near the float32 reference's)."""
    sd = reference.state_dict(rng, mixed=True)
    image = rng.uniform(-1, 1, (2, 3, 16, 16)).astype("float32")
    keras.mixed_precision.set_dtype_policy("mixed_bfloat16")
    try:
        model = keras_vit.from_checkpoint(write(tmp_path, sd), num_heads=HEADS, classifier_activation=None,
                                          input_shape=(16, 16, 3))
        out = logits(model, image).astype("float32")
    finally:
        keras.mixed_precision.set_dtype_policy("float32")
    expected = reference.forward(sd, torch.from_numpy(image), HEADS, mixed=True).numpy()
    np.testing.assert_allclose(out, expected, atol=0.1 * np.abs(expected).max())
    for i, block in enumerate(model.get_layer("encoder").blocks):
        variable = block.attention.rope_frequencies
        assert keras.backend.standardize_dtype(variable.dtype) == "float32"
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(variable), sd["rope.freqs"][:, i])


@pytest.mark.parametrize("mixed", [False, True], ids=["axial", "mixed"])
def test_the_ape_variants_load_and_match_timm_at_three_sizes(tmp_path, rng, mixed):
    """`vit_*_patch16_rope[_mixed]_ape_224`: a learned table of the patches only (`no_embed_class`) besides the
    rotations; leaving it out is off by far more than the tolerance."""
    sd = reference.state_dict(rng, mixed=mixed, ape_grid=4)
    model = keras_vit.from_checkpoint(
        write(tmp_path, sd), num_heads=HEADS, input_shape=(None, None, 3), classifier_activation=None)
    assert model.get_layer("posembed_input").interpolation == "bicubic_antialias"
    for size in one_of_the_others(SIZES):  # the three over the suite's three backends
        image = rng.uniform(-1, 1, (2, 3, *size)).astype("float32")
        expected = reference.forward(sd, torch.from_numpy(image), HEADS, mixed=mixed).numpy()
        np.testing.assert_allclose(logits(model, image), expected, atol=1e-5, rtol=1e-5)
        wrong = reference.forward(sd, torch.from_numpy(image), HEADS, mixed=mixed, table=False).numpy()
        assert np.abs(wrong - expected).max() > 1e-3


def test_export_to_the_dinov3_layout_is_refused_for_the_other_forms(tmp_path):
    """The axial form at DINOv3's period would otherwise be written as a DINOv3 file (another model)."""
    model = keras_vit.VisionTransformer(4, 16, 1, 2, 32, input_shape=(8, 8, 3), position_embedding="rope",
                                        rope_form="axial", key_bias=False, num_registers=4)
    with pytest.raises(ValueError, match="DINOv3's form and period 100 only .*rope_form=axial") as error:
        keras_vit.weights.export(model, tmp_path / "out.safetensors", format="timm_dinov3")
    assert "\n" not in str(error.value) and not os.listdir(tmp_path)


@pytest.mark.parametrize("fmt", ["npz", "timm", "kerashub"])
def test_other_weights_formats_refuse_the_other_forms_without_pointing_to_the_dinov3_layout(tmp_path, fmt):
    """Their refusal named timm_dinov3, which refuses these forms too (as "hf", which writes DINOv3's form:
    tests/weights/test_dinov3_hf.py)."""
    model = keras_vit.VisionTransformer(4, 16, 1, 2, 32, input_shape=(8, 8, 3), position_embedding="rope",
                                        rope_form="mixed", classes=3)
    with pytest.raises(ValueError, match="mixed rotary form .* cannot be written as .*format='timm_eva'") as error:
        keras_vit.weights.export(model, tmp_path / "out", format=fmt)
    assert "timm_dinov3" not in str(error.value) and "\n" not in str(error.value) and not os.listdir(tmp_path)


def test_named_entry_builds_its_model_from_the_cached_file(tmp_path, rng, monkeypatch):
    """A named RoPE-Mixed entry (its file in the cache: no download) gives the builder its weights,
    rotary form and preprocessing."""
    from keras_vit.families import FAMILIES
    from keras_vit.weights import WeightsEntry, registry

    architecture = dict(FAMILIES["RoPEMixedViTS16"], patch_size=4, hidden_dim=32, depth=2, num_heads=HEADS, mlp_dim=64,
                        input_size=16, classes=5)
    entry = WeightsEntry("RoPEMixedViTTest", "vit_test_patch4_rope_mixed_16.naver_in1k", 16, 5, None, "safetensors",
                         "https://example.invalid/model.safetensors", preprocessing="deit")
    sd = reference.state_dict(rng, mixed=True)
    model = model_of_cached_entry(monkeypatch, "RoPEMixedViTTest", architecture, entry, sd)
    assert model.preprocessing == "deit" and "apache-2.0" in registry.weights_table("RoPEMixedViTTest")
    image = rng.uniform(-1, 1, (2, 3, 16, 16)).astype("float32")
    expected = reference.forward(sd, torch.from_numpy(image), HEADS, mixed=True).numpy()
    np.testing.assert_allclose(logits(model, image), expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("form", ["axial", "mixed"])
def test_a_saved_keras_file_reads_back_its_form_and_frequencies(tmp_path, rng, form):
    """`from_checkpoint` of a `.keras` file: the rotary form, period and LayerScale from its config and variables."""
    model = keras_vit.VisionTransformer(4, 32, 2, HEADS, 64, classes=5, position_embedding="rope", rope_form=form,
                                        rope_theta=10.0, layer_scale_init=0.5, input_shape=(None, None, 3))
    model.save(str(tmp_path / "m.keras"))
    again = keras_vit.from_checkpoint(str(tmp_path / "m.keras"), input_shape=(None, None, 3))
    attention = again.get_layer("encoder").blocks[0].attention
    assert (attention.rope_form, attention.rope_theta) == (form, 10.0)
    image = rng.uniform(-1, 1, (1, 12, 20, 3)).astype("float32")
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(again(image)), keras.ops.convert_to_numpy(model(image)))
