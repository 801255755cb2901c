"""AIMv2 image towers (`Aimv2VisionModel`, an `Aimv2Model`'s vision tower) loaded from transformers
folders saved with random weights, against transformers' own outputs. transformers' learned-table
model runs at its native size only (its position ids are fixed), so the other sizes are checked
on the native-resolution (sin-cos) model."""

import keras
import numpy as np
import pytest

import keras_vit
from tests.support import one_of_the_others
from tests.support.checkpoints import randomize_family_model

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

TINY = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=48, image_size=16,
            patch_size=4, rms_norm_eps=1e-5)
TOLERANCE = 1e-5
# Variables a bias-free AIMv2 block has none of (`qkv_bias` / `mlp_bias` False).
BIASES = ("attention/qkv/bias", "attention/out/bias", "mlp/dense_0/bias", "mlp/dense_1/bias")


def _save(folder, seed=0, **options):
    model = transformers.Aimv2VisionModel(transformers.Aimv2VisionConfig(**{**TINY, **options}))
    randomize_family_model(model, seed)
    model.eval().save_pretrained(folder)
    return model


def _check(reference, folder, sizes):
    """The tokens (`pooling=None`) and the head's output match `last_hidden_state` / `pooler_output`."""
    tokens = keras_vit.from_checkpoint(str(folder), pooling=None, input_shape=(None, None, 3))
    pooled = keras_vit.from_checkpoint(str(folder), input_shape=(None, None, 3))
    for size in sizes:
        x = np.random.default_rng(1).uniform(-1, 1, (2, *size, 3)).astype(np.float32)
        with torch.no_grad():
            expected = reference(pixel_values=torch.from_numpy(x.transpose(0, 3, 1, 2)))
        np.testing.assert_allclose(keras.ops.convert_to_numpy(tokens(x)), expected.last_hidden_state.numpy(),
                                   atol=TOLERANCE, rtol=0)
        np.testing.assert_allclose(keras.ops.convert_to_numpy(pooled(x)), expected.pooler_output.numpy(),
                                   atol=TOLERANCE, rtol=0)
    return pooled


@pytest.mark.parametrize("options", [{}, dict(qkv_bias=True, mlp_bias=True)], ids=["bias_free", "biases"])
def test_aimv2_learned_table_matches_transformers_at_its_native_size(tmp_path, options):
    model = _check(_save(tmp_path, **options), tmp_path, [(16, 16)])
    assert model.preprocessing == "aimv2"
    paths = [w.path for w in model.weights]
    assert any("posembed_input" in p for p in paths) and any("embedding_norm/gamma" in p for p in paths)
    assert not [p for p in paths if p.endswith(("/beta", "map_head/query/kernel")) or "map_head/ln" in p]
    biased = [p for p in paths if p.endswith(BIASES)]
    assert len(biased) == (4 * TINY["num_hidden_layers"] if options else 0)


def test_aimv2_native_resolution_model_matches_transformers_at_three_sizes(tmp_path):
    model = _check(_save(tmp_path, is_native=True), tmp_path, one_of_the_others([(16, 16), (24, 24), (12, 20)]))
    assert not [w for w in model.weights if "posembed" in w.path]


def test_aimv2_architecture_is_read_from_the_folder(tmp_path):
    _save(tmp_path, is_native=True)
    ckpt = keras_vit.weights.read_checkpoint(str(tmp_path))
    architecture = ckpt.architecture()
    assert ckpt.format == "hf_aimv2" and ckpt.layer_norm_epsilon == 1e-5
    assert {k: architecture[k] for k in ("class_token", "position_embedding", "sincos_form", "patch_norm", "norm",
                                          "mlp", "qkv_bias", "proj_bias", "mlp_bias", "map_head")} == dict(
        class_token=False, position_embedding="sincos2d", sincos_form="mae", patch_norm=True, norm="rmsnorm",
        mlp="swiglu", qkv_bias=False, proj_bias=False, mlp_bias=False, map_head="aimv2")


def test_aimv2_model_vision_tower_matches_transformers(tmp_path):
    config = transformers.Aimv2Config(
        vision_config=TINY, projection_dim=16,
        text_config=dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=48,
                         vocab_size=64, max_position_embeddings=8))
    pair = randomize_family_model(transformers.Aimv2Model(config), 3)
    pair.save_pretrained(tmp_path)
    _check(pair.vision_model, tmp_path, [(16, 16)])


@pytest.mark.parametrize("format", ["timm", "hf", "npz"])
def test_export_of_an_aimv2_model_is_refused_in_one_line(tmp_path, format):
    """No writer but keras's records the patch norm, the head or MAE's frequencies."""
    _save(tmp_path / "folder", is_native=True)
    model = keras_vit.from_checkpoint(str(tmp_path / "folder"))
    with pytest.raises(ValueError, match=r"^[^\n]*patch_norm=True[^\n]*cannot be written"):
        keras_vit.weights.export(model, tmp_path / f"out.{format}", format=format)
    assert not (tmp_path / f"out.{format}").exists()


def test_aimv2_model_saved_by_keras_loads_back(tmp_path):
    """The layers' configs keep the head's form and MAE's frequencies."""
    _save(tmp_path / "folder", is_native=True)
    model = keras_vit.from_checkpoint(str(tmp_path / "folder"))
    model.save(tmp_path / "aimv2.keras")
    again = keras.saving.load_model(tmp_path / "aimv2.keras")
    x = np.random.default_rng(2).uniform(-1, 1, (1, 16, 16, 3)).astype(np.float32)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(again(x)), keras.ops.convert_to_numpy(model(x)),
                               atol=1e-6, rtol=0)
