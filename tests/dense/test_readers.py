"""`keras_vit.from_checkpoint` of transformers' Depth Anything (v1 / v2 relative, metric) and DPT
(DINOv2 backbone) folders: the whole depth model, `predicted_depth` within 1e-4 relative of
transformers' at the checkpoint's size and at another (the position table resized bicubically,
as `Dinov2Embeddings.interpolate_pos_encoding`)."""

import json

import keras
import numpy as np
import pytest

import keras_vit
from tests.support.dense import depth_anything, dpt, predicted_depth, randomize_dense

transformers = pytest.importorskip("transformers")

# name -> the transformers model (random weights); the neck reads hidden states 1..4, or 2..5 of 5 blocks.
CASES = {
    "depth_anything": lambda: depth_anything(transformers),
    "depth_anything_metric": lambda: depth_anything(transformers, metric=True, out_indices=(2, 3, 4, 5)),
    "dpt_project": lambda: dpt(transformers),
    "dpt_add_batch_norm": lambda: dpt(transformers, readout="add", batch_norm=True),
    "dpt_ignore_bias_free": lambda: dpt(transformers, readout="ignore", use_bias_in_fusion_residual=False),
}
SIZES = ((32, 32), (40, 56))  # the config's image_size, and another (not square)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """name -> (folder, transformers model)."""
    out = {}
    for seed, (name, make) in enumerate(CASES.items()):
        model = randomize_dense(make(), seed)
        folder = tmp_path_factory.mktemp(name)
        model.save_pretrained(folder)
        out[name] = folder, model
    return out


def images(size, seed=1):
    return np.random.default_rng(seed).standard_normal((2, *size, 3)).astype("float32")


@pytest.mark.parametrize("name", CASES)
def test_depth_matches_transformers(folders, name):
    folder, reference = folders[name]
    model = keras_vit.from_checkpoint(folder)
    assert isinstance(model, keras.Model) and model.get_layer("dpt_head") is not None
    for size in SIZES:
        x = images(size)
        want = predicted_depth(reference, x)
        got = model.predict(x, verbose=0)
        assert got.shape == want.shape, (size, got.shape, want.shape)
        scale = np.abs(want).max()
        assert scale > 0.1 and (want > 0).mean() > 0.5  # the comparison sees depth, not ReLU's zeros
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-4 * scale, err_msg=f"{name} at {size}")


def test_depth_anything_gives_the_input_size_and_dpt_sixteen_times_the_even_patch_grid(folders):
    """DPT's fusions double the size from the down-sampled level (grid 5 x 7 -> 3 x 4), its head once more."""
    x = images((40, 56))
    assert keras_vit.from_checkpoint(folders["depth_anything"][0]).predict(x, verbose=0).shape == (2, 40, 56)
    assert keras_vit.from_checkpoint(folders["dpt_project"][0]).predict(x, verbose=0).shape == (2, 96, 128)


def test_a_plain_vit_folder_still_gives_the_vision_transformer(tmp_path):
    config = transformers.Dinov2Config(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
                                       patch_size=8, image_size=16)
    transformers.Dinov2Model(config).save_pretrained(tmp_path)
    model = keras_vit.from_checkpoint(tmp_path)
    assert model.get_layer("encoder").depth == 1 and "dpt_head" not in [layer.name for layer in model.layers]


def _edit_config(folder, tmp_path, **changes):
    import shutil

    target = tmp_path / "edited"
    shutil.copytree(folder, target)
    config = json.loads((target / "config.json").read_text())
    for key, value in changes.items():
        section, _, field = key.rpartition("__")
        (config[section] if section else config)[field] = value
    (target / "config.json").write_text(json.dumps(config))
    return target


@pytest.mark.parametrize("name, changes, message", [
    ("depth_anything", dict(backbone_config__model_type="vit"), "DINOv2 backbone"),
    ("depth_anything", dict(backbone_config__reshape_hidden_states=True), "reshape_hidden_states"),
    ("depth_anything", dict(backbone_config__out_indices=[0, 1, 2, 3]), "out_indices"),
    ("depth_anything", dict(depth_estimation_type="absolute"), "depth_estimation_type"),
    ("depth_anything", dict(patch_size=14), "patch_size"),
    ("dpt_project", dict(is_hybrid=True), "DPT-Hybrid"),
    ("dpt_project", dict(hidden_act="relu"), "hidden_act"),
    ("dpt_project", dict(add_projection=True), "add_projection"),
    ("dpt_project", dict(readout_type="ignore"), "unexpected 'readout_0/kernel'"),
])
def test_layouts_keras_vit_does_not_read_are_refused_in_one_line(folders, tmp_path, name, changes, message):
    folder = _edit_config(folders[name][0], tmp_path, **changes)
    with pytest.raises(ValueError, match=message) as error:
        keras_vit.from_checkpoint(folder)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("name", CASES)
def test_depth_models_are_written_back_key_for_key(folders, name, tmp_path):
    """`keras_vit.weights.export(model, folder, format="hf")`: Depth Anything and DPT folders with the
    tensors read (the mask token, which inference never reads, and BatchNorm's step counts left out),
    which transformers loads with the same depth."""
    from safetensors.numpy import load_file

    folder, reference = folders[name]
    model = keras_vit.from_checkpoint(folder)
    keras_vit.weights.export(model, tmp_path / "out", format="hf")
    original, written = (load_file(f / "model.safetensors") for f in (folder, tmp_path / "out"))
    unread = {k for k in original if k.endswith("num_batches_tracked")} | {"backbone.embeddings.mask_token"}
    assert set(written) == set(original) - unread
    for key, value in written.items():
        np.testing.assert_array_equal(value, original[key], err_msg=key)
    loaded = type(reference).from_pretrained(tmp_path / "out").eval()
    for size in SIZES:
        want = predicted_depth(reference, images(size))
        np.testing.assert_allclose(predicted_depth(loaded, images(size)), want, rtol=0, atol=1e-4 * np.abs(want).max())
    again = keras_vit.from_checkpoint(tmp_path / "out")
    np.testing.assert_allclose(again.predict(images(SIZES[1]), verbose=0), model.predict(images(SIZES[1]), verbose=0),
                               rtol=0, atol=1e-6)


@pytest.mark.backend_independent
def test_a_dpt_head_transformers_has_no_layout_for_is_refused_in_one_line(tmp_path):
    vit = keras_vit.VisionTransformer(input_shape=(32, 32, 3), patch_size=8, hidden_dim=16, depth=4, num_heads=2,
                                      mlp_dim=32, include_top=False, pooling=None)
    model = keras_vit.DenseModel(vit, "dpt", "semantic", num_classes=3, neck_hidden_sizes=(8, 8, 16, 16),
                                 fusion_hidden_size=8)
    with pytest.raises(ValueError, match=r"head='dpt', task='depth'.*\(Depth Anything\).*\(DPT\)") as error:
        keras_vit.weights.export(model, tmp_path / "out", format="hf")
    assert "\n" not in str(error.value) and not (tmp_path / "out").exists()
