"""DINOv3 (`DINOv3ViTModel`) loaded from transformers folders saved with random weights, against
transformers' own outputs at the native size and two others (one non-square)."""

import keras
import numpy as np
import pytest

import keras_vit
from tests.support.checkpoints import randomize_family_model

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

TINY = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, image_size=16,
            patch_size=4, num_register_tokens=4, layer_norm_eps=1e-5)
TOLERANCE = 1e-5


def _save(folder, **options):
    model = transformers.DINOv3ViTModel(transformers.DINOv3ViTConfig(**{**TINY, **options}))
    randomize_family_model(model, len(options))
    model.eval().save_pretrained(folder)
    return model


@pytest.mark.parametrize("options", [{}, dict(use_gated_mlp=True, hidden_act="silu", rope_theta=50.0),
                                     dict(proj_bias=False, mlp_bias=False)],
                         ids=["mlp", "swiglu", "bias_free"])
def test_dinov3_matches_transformers_at_three_sizes(tmp_path, options):
    reference = _save(tmp_path, **options)
    model = keras_vit.from_checkpoint(str(tmp_path), input_shape=(None, None, 3))
    assert model.preprocessing == "dinov3"
    assert not [w for w in model.weights if "posembed" in w.path]
    for size in ((16, 16), (24, 24), (12, 20)):
        x = np.random.default_rng(0).uniform(-1, 1, (2, *size, 3)).astype(np.float32)
        with torch.no_grad():
            expected = reference(pixel_values=torch.from_numpy(x.transpose(0, 3, 1, 2)))
        tokens = keras.ops.convert_to_numpy(model(x))
        np.testing.assert_allclose(tokens, expected.last_hidden_state.numpy(), atol=TOLERANCE, rtol=0)
        np.testing.assert_allclose(tokens[:, 0], expected.pooler_output.numpy(), atol=TOLERANCE, rtol=0)


def test_dinov3_options_keras_vit_cannot_run_are_refused_in_one_line(tmp_path):
    _save(tmp_path, query_bias=False)
    with pytest.raises(ValueError, match=r"query_bias=False; keras_vit reads query_bias=True only"):
        keras_vit.from_checkpoint(str(tmp_path))


@pytest.mark.parametrize("format", ["timm", "hf", "npz"])
def test_export_of_a_dinov3_model_is_refused_in_one_line(tmp_path, format):
    """No writer records rope or the missing key bias: writing one would lose them silently."""
    _save(tmp_path / "folder")
    model = keras_vit.from_checkpoint(str(tmp_path / "folder"))
    with pytest.raises(ValueError, match=r"^[^\n]*rotary position embeddings[^\n]*model\.save"):
        keras_vit.weights.export(model, tmp_path / f"out.{format}", format=format)
    assert not (tmp_path / f"out.{format}").exists()
