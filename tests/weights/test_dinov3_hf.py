"""DINOv3 (`DINOv3ViTModel`) loaded from transformers folders saved with random weights, against
transformers' own outputs at the native size and two others (one non-square)."""

import keras
import numpy as np
import pytest

import keras_vit
from tests.support import one_of_the_others
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


def _assert_matches(model, reference, sizes, seed):
    """keras_vit's tokens and class token within TOLERANCE of transformers' at each size."""
    for size in sizes:
        x = np.random.default_rng(seed).uniform(-1, 1, (2, *size, 3)).astype(np.float32)
        with torch.no_grad():
            expected = reference(pixel_values=torch.from_numpy(x.transpose(0, 3, 1, 2)))
        tokens = keras.ops.convert_to_numpy(model(x))
        np.testing.assert_allclose(tokens, expected.last_hidden_state.numpy(), atol=TOLERANCE, rtol=0)
        np.testing.assert_allclose(tokens[:, 0], expected.pooler_output.numpy(), atol=TOLERANCE, rtol=0)


@pytest.mark.parametrize("options", [{}, dict(use_gated_mlp=True, hidden_act="silu", rope_theta=50.0),
                                     dict(proj_bias=False, mlp_bias=False)],
                         ids=["mlp", "swiglu", "bias_free"])
def test_dinov3_matches_transformers_at_three_sizes(tmp_path, options):
    reference = _save(tmp_path, **options)
    model = keras_vit.from_checkpoint(str(tmp_path), input_shape=(None, None, 3))
    assert model.preprocessing == "dinov3"
    assert not [w for w in model.weights if "posembed" in w.path]
    _assert_matches(model, reference, one_of_the_others(((16, 16), (24, 24), (12, 20))), seed=0)  # all three over the suite


def test_dinov3_options_keras_vit_cannot_run_are_refused_in_one_line(tmp_path):
    _save(tmp_path, query_bias=False)
    with pytest.raises(ValueError, match=r"query_bias=False, key_bias=False, value_bias=True; keras_vit reads query_bias = value_bias"):
        keras_vit.from_checkpoint(str(tmp_path))


@pytest.mark.parametrize("format", ["timm", "npz"])
def test_export_of_a_dinov3_model_is_refused_in_one_line(tmp_path, format):
    """No writer records rope or the missing key bias: writing one would lose them silently."""
    _save(tmp_path / "folder")
    model = keras_vit.from_checkpoint(str(tmp_path / "folder"))
    with pytest.raises(ValueError, match=r"^[^\n]*rotary position embeddings[^\n]*hf[^\n]*model\.save"):
        keras_vit.weights.export(model, tmp_path / f"out.{format}", format=format)
    assert not (tmp_path / f"out.{format}").exists()


# Config fields that say who wrote the file, not what the model is.
_PROVENANCE = ("transformers_version", "architectures", "dtype", "torch_dtype", "_name_or_path")


@pytest.mark.parametrize("options", [{}, dict(use_gated_mlp=True, hidden_act="silu", rope_theta=50.0),
                                     dict(query_bias=False, value_bias=False, proj_bias=False, mlp_bias=False),
                                     dict(key_bias=True, num_register_tokens=0)],
                         ids=["mlp", "swiglu", "bias_free", "key_bias"])
def test_dinov3_exports_to_transformers_and_reads_back_the_same(tmp_path, options):
    """`export(format="hf")` of a DINOv3 model: transformers loads the folder and agrees with keras_vit at
    the native and a non-square size; a folder read and written back holds the same tensors and config
    (the pre-training mask token, which keras_vit leaves out, is written as transformers' zero)."""
    from safetensors.numpy import load_file

    from keras_vit.cli import main

    reference = transformers.DINOv3ViTModel(transformers.DINOv3ViTConfig(**{**TINY, **options}))
    randomize_family_model(reference, len(options))
    torch.nn.init.zeros_(reference.embeddings.mask_token)
    reference.eval().save_pretrained(tmp_path / "in")
    model = keras_vit.from_checkpoint(str(tmp_path / "in"), input_shape=(None, None, 3))
    keras_vit.weights.export(model, tmp_path / "out", format="hf")
    exported = transformers.DINOv3ViTModel.from_pretrained(tmp_path / "out").eval()
    _assert_matches(model, exported, ((16, 16), (12, 20)), seed=1)
    assert main(["convert", str(tmp_path / "in"), str(tmp_path / "converted"), "--format", "hf"]) == 0
    original = load_file(str(tmp_path / "in" / "model.safetensors"))
    for folder in ("out", "converted"):
        written = load_file(str(tmp_path / folder / "model.safetensors"))
        assert written.keys() == original.keys()
        for key, value in original.items():
            np.testing.assert_allclose(written[key], value, atol=1e-7, rtol=0, err_msg=key)
        configs = [transformers.DINOv3ViTConfig.from_pretrained(tmp_path / f).to_dict() for f in ("in", folder)]
        assert [{k: v for k, v in c.items() if k not in _PROVENANCE} for c in configs][0] == \
            {k: v for k, v in configs[1].items() if k not in _PROVENANCE}


@pytest.mark.parametrize("args, message", [
    (dict(rope_form="axial"), r"rope_form='axial', DINOv3ViTModel rotates DINOv3's form only"),
    (dict(qk_norm=True), r"qk_norm=True cannot be written as hf; formats that record it: [^\n]*timm_dinov3"),
    (dict(norm="rmsnorm"), r"norm='rmsnorm' cannot be written as hf"),
    (dict(include_top=True, classes=3), r"DINOv3 needs None \(export it with include_top=False\)"),
])
def test_what_transformers_dinov3_cannot_hold_is_refused_in_one_line(tmp_path, args, message):
    model = keras_vit.VisionTransformer(4, 32, 1, 2, 64, input_shape=(16, 16, 3), position_embedding="rope",
                                       num_registers=4, layer_scale_init=1.0, key_bias=False,
                                       **{"include_top": False, **args})
    with pytest.raises(ValueError, match=r"^[^\n]*" + message):
        keras_vit.weights.export(model, tmp_path / "out", format="hf")
    assert not (tmp_path / "out").exists()
