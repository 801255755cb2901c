"""The architecture comes from the file, its family or its named entry, never from a guess: SigLIP
weights without `config.json` (what the named SigLIP entries download) get their heads and the
tanh GELU, the DINOv2-with-registers entries their registers, and a value nobody records is
asked for by name. Against transformers models with random weights written here."""

import json
import os
import shutil

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.families import FAMILIES
from keras_vit.weights import registry
from tests.support.checkpoints import randomize_family_model
from tests.support.commands import fails

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

TOLERANCE = 1e-5


def _weights_only(tmp_path, model, name="model.safetensors"):
    """`model`'s weights file alone, as the named entries download it (no `config.json`)."""
    folder = tmp_path / "saved"
    model.save_pretrained(folder)
    path = tmp_path / name
    shutil.copy(folder / "model.safetensors", path)
    return str(path)


def _run(model, x):
    with torch.no_grad():
        return model(pixel_values=torch.from_numpy(x.transpose(0, 3, 1, 2)))


def _close(actual, expected):
    np.testing.assert_allclose(keras.ops.convert_to_numpy(actual), expected, atol=TOLERANCE, rtol=0)


def _image(size, seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, (2, size, size, 3)).astype(np.float32)


def _named(monkeypatch, family, name, path, **architecture):
    """A named model `family` (monkeypatched into `FAMILIES`) with an entry `name` whose file is
    `path`, put in the cache as if downloaded."""
    monkeypatch.setitem(FAMILIES, family, architecture)
    monkeypatch.setattr(registry, "ENTRIES", list(registry.ENTRIES))
    entry = registry.WeightsEntry(family, name, 28, None, None, "safetensors",
                                  f"https://example.invalid/{name}/model.safetensors",
                                  preprocessing=architecture["preprocessing"])
    registry.add(entry)
    os.makedirs(os.path.dirname(registry.cache_path(entry)))
    shutil.copy(path, registry.cache_path(entry))
    return entry


@pytest.fixture(scope="module")
def so400m_like():
    """A SiglipVisionModel of So400m's width and head layout (16 heads of 72), one block."""
    config = transformers.SiglipVisionConfig(hidden_size=1152, num_attention_heads=16, num_hidden_layers=1,
                                             intermediate_size=32, image_size=28, patch_size=14)
    return randomize_family_model(transformers.SiglipVisionModel(config), 1)


@pytest.fixture(scope="module")
def narrow_siglip():
    """Width 48 in 4 heads of 12: width / 64 would say 0 (or 1) heads."""
    config = transformers.SiglipVisionConfig(hidden_size=48, num_attention_heads=4, num_hidden_layers=2,
                                             intermediate_size=64, image_size=28, patch_size=14)
    return randomize_family_model(transformers.SiglipVisionModel(config), 2)


def test_siglip_so400m_file_without_config_gets_16_heads_and_tanh_gelu(so400m_like, tmp_path):
    x = _image(28)
    model = keras_vit.from_checkpoint(_weights_only(tmp_path, so400m_like))
    encoder = model.get_layer("encoder")
    assert encoder.num_heads == 16 and encoder.approximate_gelu  # transformers' gelu_pytorch_tanh
    _close(model(x), _run(so400m_like, x).pooler_output.numpy())


def test_siglip_with_a_config_that_names_no_activation_gets_tanh_gelu(narrow_siglip, tmp_path):
    """The hub's SigLIP `config.json` leaves `hidden_act` out: its config class's default."""
    narrow_siglip.save_pretrained(tmp_path / "folder")
    config_file = tmp_path / "folder" / "config.json"
    config = json.loads(config_file.read_text())
    config.pop("hidden_act")
    config_file.write_text(json.dumps(config))
    x = _image(28)
    model = keras_vit.from_checkpoint(str(tmp_path / "folder"))
    assert model.get_layer("encoder").approximate_gelu
    _close(model(x), _run(narrow_siglip, x).pooler_output.numpy())


def test_unknown_head_count_is_asked_for(narrow_siglip, tmp_path, capsys):
    path = _weights_only(tmp_path, narrow_siglip)
    with pytest.raises(ValueError, match=r"does not record its attention head count.*pass num_heads="):
        keras_vit.from_checkpoint(path)
    capsys.readouterr()
    fails(["convert", path, tmp_path / "out.npz"], capsys, "--num-heads", "num_heads=")
    assert not (tmp_path / "out.npz").exists()
    x = _image(28)
    _close(keras_vit.from_checkpoint(path, num_heads=4)(x), _run(narrow_siglip, x).pooler_output.numpy())


def test_named_siglip_entry_takes_its_models_heads(narrow_siglip, tmp_path, monkeypatch):
    """A named entry without `config.json` is built with its model's head count (So400m's 16,
    here a narrow model's 4), through `from_checkpoint` and through its builder's config."""
    path = _weights_only(tmp_path, narrow_siglip)
    architecture = dict(patch_size=14, hidden_dim=48, depth=2, num_heads=4, mlp_dim=64, class_token=False,
                        pooling="map", approximate_gelu=True, include_top=False, preprocessing="siglip")
    _named(monkeypatch, "SigLIPNarrow14", "siglip-narrow-patch14-28", path, **architecture)
    x = _image(28)
    expected = _run(narrow_siglip, x).pooler_output.numpy()
    model = keras_vit.from_checkpoint("siglip-narrow-patch14-28")
    assert model.get_layer("encoder").num_heads == 4 and model.preprocessing == "siglip"
    _close(model(x), expected)
    _close(keras_vit.VisionTransformer(**architecture, weights="siglip-narrow-patch14-28")(x), expected)


def test_named_dinov2_registers_entry_builds_without_num_registers(tmp_path, monkeypatch):
    """The `reg4` entries are timm files with register tokens: a builder without
    `num_registers` takes the checkpoint's."""
    config = transformers.Dinov2WithRegistersConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                                    image_size=28, patch_size=14,
                                                    num_register_tokens=4)
    reference = randomize_family_model(transformers.Dinov2WithRegistersModel(config), 3)
    reference.save_pretrained(tmp_path / "hf")
    timm_file = str(tmp_path / "timm.safetensors")
    keras_vit.weights.convert_checkpoint(str(tmp_path / "hf"), timm_file, format="timm")
    architecture = dict(patch_size=14, hidden_dim=32, depth=2, num_heads=2, mlp_dim=128, layer_scale_init=1e-5,
                        approximate_gelu=False, include_top=False, preprocessing="dinov2")
    _named(monkeypatch, "DINOv2Narrow14", "vit_narrow_patch14_reg4_dinov2.lvd142m", timm_file, **architecture)
    x = _image(28)
    expected = _run(reference, x).last_hidden_state.numpy()
    model = keras_vit.VisionTransformer(**architecture, weights="vit_narrow_patch14_reg4_dinov2.lvd142m")
    assert model.get_layer("registers") is not None
    _close(model(x), expected)
    with pytest.raises(ValueError, match=r"4 register tokens, the model 0 \(build it with num_registers=4\)"):
        keras_vit.VisionTransformer(**architecture, num_registers=0, weights=timm_file)
