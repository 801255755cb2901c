"""EVA-02 from timm `eva02_*_patch14_*` state dicts (key names from timm's `eva.py`: Ti / S with a fused
`qkv` and packed SwiGLU, B / L unfused with the MLP's inner norm), written here from random weights and
checked against an independent torch reference of timm's formulas (`tests/support/timm_rope_vit.py`) at
the native grid and two others; each mutation of the reference is off by far more than the tolerance.
And `format="timm_eva"`: a timm file read and written back is identical key for key (EVA-02, RoPE-ViT)."""

import os

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.config.vit_config import ViTConfig
from keras_vit.weights.containers import read_safetensors, write_safetensors

torch = pytest.importorskip("torch")
from tests.support import one_of_the_others, timm_rope_vit as reference  # noqa: E402
from tests.support.checkpoints import model_of_cached_entry  # noqa: E402

HEADS = 2
SIZES = ((16, 16), (12, 20), (24, 8))  # the native 4 x 4 patches of 4 pixels, two others
MUTATIONS = (dict(indexing="xy"), dict(table=False), dict(mlp_norm=False), dict(key_bias=0.5),
             dict(prefix_rotated=True))


def write(path, sd):
    write_safetensors(str(path), sd, {"format": "pt"})
    return str(path)


def logits(model, image):
    return keras.ops.convert_to_numpy(model(np.transpose(image, (0, 2, 3, 1))))


@pytest.mark.parametrize("unfused", [False, True], ids=["ti_s", "b_l"])
def test_loads_and_matches_timm_at_three_sizes(tmp_path, rng, unfused):
    sd = reference.eva02_state_dict(rng, unfused=unfused)
    model = keras_vit.from_checkpoint(write(tmp_path / "m.safetensors", sd), num_heads=HEADS,
                                      input_shape=(None, None, 3), classifier_activation=None)
    rope = model.get_layer("rope_input")
    assert (rope.form, rope.indexing, rope.reference_grid) == ("axial", "ij", (16, 16))
    assert model.preprocessing == "eva02" and model.get_layer("encoder").blocks[0].attention.key_bias is False
    for size in one_of_the_others(SIZES):  # the three over the suite's three backends
        image = rng.uniform(-1, 1, (2, 3, *size)).astype("float32")
        expected = reference.eva02_forward(sd, torch.from_numpy(image), HEADS).numpy()
        np.testing.assert_allclose(logits(model, image), expected, atol=1e-5, rtol=1e-5)
        for mutation in MUTATIONS if unfused else [m for m in MUTATIONS if "mlp_norm" not in m]:
            wrong = reference.eva02_forward(sd, torch.from_numpy(image), HEADS, **mutation).numpy()
            assert np.abs(wrong - expected).max() > 1e-3, mutation


@pytest.mark.parametrize("kind", ["eva02_ti_s", "eva02_b_l", "rope_axial", "rope_mixed", "rope_axial_ape",
                                  "rope_mixed_ape"])
def test_a_timm_file_read_and_written_back_is_identical_key_for_key(tmp_path, rng, kind):
    sd = (reference.eva02_state_dict(rng, unfused=kind == "eva02_b_l") if kind.startswith("eva02")
          else reference.state_dict(rng, mixed="mixed" in kind, ape_grid=4 if "ape" in kind else None))
    src = write(tmp_path / "in.safetensors", sd)
    keras_vit.weights.convert_checkpoint(src, str(tmp_path / "out.safetensors"), format="timm_eva", num_heads=HEADS)
    back, _ = read_safetensors(str(tmp_path / "out.safetensors"))
    assert sorted(back) == sorted(sd)
    for key, value in sd.items():
        np.testing.assert_array_equal(np.asarray(back[key].load()), value, err_msg=key)


def test_a_model_exported_as_timm_eva_reads_back_to_the_same_logits(tmp_path, rng):
    sd = reference.eva02_state_dict(rng, unfused=True)
    model = keras_vit.from_checkpoint(write(tmp_path / "m.safetensors", sd), num_heads=HEADS, classifier_activation=None)
    keras_vit.weights.export(model, tmp_path / "out.safetensors", format="timm_eva")
    again = keras_vit.from_checkpoint(str(tmp_path / "out.safetensors"), num_heads=HEADS, classifier_activation=None)
    image = rng.uniform(-1, 1, (1, 3, 16, 16)).astype("float32")
    np.testing.assert_array_equal(logits(again, image), logits(model, image))


def test_settings_the_layout_does_not_hold_are_refused_in_one_line(tmp_path):
    """An EVA-02-shaped model at another rotary period would be read back at EVA-02's."""
    model = keras_vit.VisionTransformer(4, 16, 1, 2, 24, input_shape=(16, 16, 3), position_embedding="rope",
                                        rope_form="axial", rope_indexing="ij", rope_absolute=True, key_bias=False,
                                        mlp="swiglu", fc_norm=True, pooling="avg", classes=3, rope_theta=100.0)
    with pytest.raises(ValueError, match="records EVA-02's rotary settings .* model.save") as error:
        keras_vit.weights.export(model, tmp_path / "out.safetensors", format="timm_eva")
    assert "\n" not in str(error.value) and not os.listdir(tmp_path)


@pytest.mark.parametrize("kwargs, message", [
    (dict(rope_absolute=True), "rope_absolute .* position_embedding='rope'"),
    (dict(position_embedding="rope", rope_indexing="ij"), "rope_indexing .* rope_form='axial'"),
])
def test_impossible_combinations_are_refused_in_one_line(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ViTConfig(**kwargs)


def test_keras_vit_convert_writes_the_eva_layout_and_refuses_other_forms_with_exit_2(tmp_path, rng, capsys):
    from keras_vit.cli import main
    from tests.support.commands import fails

    sd = reference.eva02_state_dict(rng)
    src = write(tmp_path / "in.safetensors", sd)
    assert main(["convert", src, str(tmp_path / "out.safetensors"), "--format", "timm_eva", "--num-heads", "2"]) == 0
    assert sorted(read_safetensors(str(tmp_path / "out.safetensors"))[0]) == sorted(sd)
    dinov3 = write(tmp_path / "dinov3.safetensors", {**reference.state_dict(rng), "reg_token": sd["cls_token"]})
    fails(["convert", dinov3, tmp_path / "x.safetensors", "--format", "timm_eva", "--num-heads", "2"], capsys,
          "use format='timm_dinov3'")
    assert not os.path.exists(tmp_path / "x.safetensors")


def test_a_saved_keras_file_reads_back_its_order_reference_grid_and_table(tmp_path, rng):
    sd = reference.eva02_state_dict(rng, unfused=True)
    model = keras_vit.from_checkpoint(write(tmp_path / "m.safetensors", sd), num_heads=HEADS, classifier_activation=None,
                                      input_shape=(None, None, 3))
    model.save(str(tmp_path / "m.keras"))
    again = keras_vit.from_checkpoint(str(tmp_path / "m.keras"), input_shape=(None, None, 3), classifier_activation=None)
    rope = again.get_layer("rope_input")
    assert (rope.indexing, rope.reference_grid) == ("ij", (16, 16))
    image = rng.uniform(-1, 1, (1, 3, 12, 20)).astype("float32")
    np.testing.assert_array_equal(logits(again, image), logits(model, image))


def test_named_entry_builds_its_model_from_the_cached_file(tmp_path, rng, monkeypatch):
    """A named EVA-02 entry (its file in the cache: no download) gives the builder its weights and preprocessing."""
    from keras_vit.families import FAMILIES
    from keras_vit.weights import WeightsEntry, registry

    architecture = dict(FAMILIES["EVA02B14"], patch_size=4, hidden_dim=32, depth=2, num_heads=HEADS, mlp_dim=48,
                        input_size=16, classes=5)
    entry = WeightsEntry("EVA02Test", "eva02_test_patch4_16.mim_in22k_ft_in1k", 16, 5, None, "safetensors",
                         "https://example.invalid/model.safetensors", license="mit", preprocessing="eva02")
    sd = reference.eva02_state_dict(rng, unfused=True)
    model = model_of_cached_entry(monkeypatch, "EVA02Test", architecture, entry, sd)
    assert model.preprocessing == "eva02" and "mit" in registry.weights_table("EVA02Test")
    image = rng.uniform(-1, 1, (2, 3, 16, 16)).astype("float32")
    expected = reference.eva02_forward(sd, torch.from_numpy(image), HEADS).numpy()
    np.testing.assert_allclose(logits(model, image), expected, atol=1e-5, rtol=1e-5)
