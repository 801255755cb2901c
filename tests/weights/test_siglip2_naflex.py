"""SigLIP 2 NaFlex (`Siglip2VisionModel`) loaded from transformers folders saved with random
weights, against transformers' own outputs on images of several aspect ratios under one patch
budget, including images that fill fewer patches than the budget (transformers#37907)."""

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.layers.attention import MultiHeadSelfAttention
from keras_vit.data.naflex_inputs import budget_size, naflex_inputs, patchify
from tests.support.checkpoints import randomize_family_model

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

TINY = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, patch_size=4,
            num_patches=16)
TOLERANCE = 1e-5
# Shapes of 0-255 images: wide, small (fills 36 of 40 patches), tall, tiny (1 patch).
SHAPES = ((24, 40), (8, 12), (64, 16), (3, 3))


def _save(folder):
    model = randomize_family_model(transformers.Siglip2VisionModel(transformers.Siglip2VisionConfig(**TINY)), 3)
    model.save_pretrained(folder)
    return model


def _images():
    rng = np.random.default_rng(0)
    return [rng.uniform(0, 255, (*shape, 3)).astype(np.float32) for shape in SHAPES]


def _reference(reference, inputs):
    with torch.no_grad():
        return reference(pixel_values=torch.from_numpy(inputs["patches"]),
                         pixel_attention_mask=torch.from_numpy(inputs["mask"]),
                         spatial_shapes=torch.from_numpy(inputs["spatial_shapes"]).long())


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    path = tmp_path_factory.mktemp("siglip2")
    return path, _save(path)


@pytest.mark.parametrize("budget", [40, 64])
def test_naflex_matches_transformers(folder, budget):
    path, reference = folder
    pooled_model = keras_vit.from_checkpoint(str(path))
    tokens_model = keras_vit.from_checkpoint(str(path), include_top=False, pooling=None)
    assert pooled_model.preprocessing == "siglip2"
    inputs = naflex_inputs(_images(), pooled_model, max_num_patches=budget)
    assert (inputs["mask"].sum(1) < budget).any()  # images that leave part of the budget as padding
    expected = _reference(reference, inputs)
    valid = inputs["mask"].astype(bool)
    pooled = keras.ops.convert_to_numpy(pooled_model(inputs))
    np.testing.assert_allclose(pooled, expected.pooler_output.numpy(), atol=TOLERANCE, rtol=0)
    tokens = keras.ops.convert_to_numpy(tokens_model(inputs))
    np.testing.assert_allclose(tokens[valid], expected.last_hidden_state.numpy()[valid], atol=TOLERANCE, rtol=0)


def test_padding_is_never_attended_to_nor_pooled(folder):
    """The answer for an image is that of its own patches alone: padding it to a larger budget
    with arbitrary patches changes neither its tokens nor its pooled features."""
    path, _ = folder
    pooled_model = keras_vit.from_checkpoint(str(path))
    tokens_model = keras_vit.from_checkpoint(str(path), include_top=False, pooling=None)
    tight = naflex_inputs(_images()[:1], pooled_model, max_num_patches=40)
    count = int(tight["mask"].sum())
    padded = {key: value.copy() for key, value in tight.items()}
    garbage = np.random.default_rng(1).normal(0, 50, (1, 24, tight["patches"].shape[-1])).astype(np.float32)
    padded["patches"] = np.concatenate([tight["patches"][:, :count], garbage], axis=1)
    padded["mask"] = np.concatenate([tight["mask"][:, :count], np.zeros((1, 24), np.int32)], axis=1)
    for model in (pooled_model, tokens_model):
        alone = keras.ops.convert_to_numpy(model({**tight, "patches": tight["patches"][:, :count],
                                                  "mask": tight["mask"][:, :count]}))
        with_padding = keras.ops.convert_to_numpy(model(padded))
        if with_padding.ndim == 3:
            with_padding = with_padding[:, :count]
        np.testing.assert_allclose(with_padding, alone, atol=TOLERANCE, rtol=0)


def test_explicit_attention_masks_the_padding_as_the_fused_path():
    layer = MultiHeadSelfAttention(2)
    x = np.random.default_rng(2).normal(size=(2, 5, 8)).astype(np.float32)
    valid = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], np.int32)
    layer.build(x.shape)
    fused = keras.ops.convert_to_numpy(layer(x, valid=valid))
    explicit, weights = layer(x, valid=valid, return_attention_weights=True)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(explicit), fused, atol=1e-6, rtol=0)
    assert np.all(keras.ops.convert_to_numpy(weights)[0, :, :, 3:] == 0)


def test_budget_size_is_transformers_rule():
    from transformers.models.siglip2.image_processing_pil_siglip2 import get_image_size_for_max_num_patches

    for height, width in ((24, 40), (8, 12), (64, 16), (3, 3), (480, 640), (1000, 37), (224, 224)):
        for budget in (1, 40, 256, 1024):
            assert budget_size(height, width, 16, budget) == get_image_size_for_max_num_patches(
                height, width, 16, budget), (height, width, budget)


def test_patches_are_transformers_layout():
    from transformers.models.siglip2.image_processing_pil_siglip2 import convert_image_to_patches

    image = np.random.default_rng(3).uniform(0, 255, (12, 8, 3)).astype(np.float32)
    expected = convert_image_to_patches(image.transpose(2, 0, 1), 4)
    np.testing.assert_array_equal(patchify(image, 4), expected)
    inputs = naflex_inputs([image], patch_size=4, max_num_patches=8)  # 6 patches: no resize
    np.testing.assert_allclose(inputs["patches"][0, :6], (expected - 127.5) / 127.5, atol=1e-6)
    assert inputs["spatial_shapes"].tolist() == [[3, 2]] and inputs["mask"].tolist() == [[1] * 6 + [0] * 2]


def test_naflex_options_are_checked():
    with pytest.raises(ValueError, match="naflex=True takes patch tokens only"):
        keras_vit.VisionTransformer(naflex=True)
    with pytest.raises(ValueError, match="max_num_patches=0 must be a whole number"):
        naflex_inputs([np.zeros((8, 8, 3))], patch_size=4, max_num_patches=0)
    with pytest.raises(ValueError, match=r"Image 0 has shape \(8, 8\)"):
        naflex_inputs([np.zeros((8, 8))], patch_size=4)
    with pytest.raises(ValueError, match="model is a int, not a NaFlex model; without a model give patch_size="):
        naflex_inputs([np.zeros((8, 8, 3))], 4)


def test_features_predict_and_export_take_naflex_inputs(folder, tmp_path):
    from keras_vit.inference.predict import predict

    path, reference = folder
    model = keras_vit.from_checkpoint(str(path), include_top=True, classes=3, classifier_activation=None)
    inputs = naflex_inputs(_images(), model, max_num_patches=40)
    expected = _reference(reference, inputs)
    valid = inputs["mask"].astype(bool)
    last = keras_vit.features(model, inputs, layers=-1, norm=True, batch_size=3)
    np.testing.assert_allclose(last[valid], expected.last_hidden_state.numpy()[valid], atol=TOLERANCE, rtol=0)
    np.testing.assert_allclose(model.predict(inputs, verbose=0), keras.ops.convert_to_numpy(model(inputs)),
                               atol=TOLERANCE, rtol=0)
    files = []
    for i, image in enumerate(_images()[:2]):
        files.append(str(tmp_path / f"{i}.png"))
        keras.utils.save_img(files[-1], image.astype(np.uint8))
    assert [len(classes) for classes in predict(model, files, top=2)] == [2, 2]
    with pytest.raises(ValueError, match="grid=True needs one patch grid per batch"):
        keras_vit.features(model, inputs, grid=True)
    with pytest.raises(ValueError, match=r"^[^\n]*SigLIP needs None \(export it with include_top=False\)"):
        keras_vit.weights.export(model, tmp_path / "out", format="hf")
    with pytest.raises(ValueError, match=r"^[^\n]*a NaFlex model \(SigLIP 2\) cannot be written as timm; export with "
                                         r"format= hf"):
        keras_vit.weights.export(model, tmp_path / "out", format="timm")
    assert not (tmp_path / "out").exists()  # the serving exports: tests/inference/test_export_naflex.py


def test_the_image_tower_of_a_siglip2_model_folder(tmp_path):
    vision = {key: TINY[key] for key in TINY}
    text = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64, vocab_size=50)
    pair = transformers.Siglip2Model(transformers.Siglip2Config(vision_config=vision, text_config=text))
    randomize_family_model(pair, 4).save_pretrained(tmp_path)
    model = keras_vit.from_checkpoint(str(tmp_path))
    inputs = naflex_inputs(_images(), model, max_num_patches=40)
    expected = _reference(pair.vision_model, inputs).pooler_output.numpy()
    np.testing.assert_allclose(keras.ops.convert_to_numpy(model(inputs)), expected, atol=TOLERANCE, rtol=0)


def test_a_naflex_model_saves_and_loads(tmp_path):
    model = keras_vit.VisionTransformer(patch_size=4, hidden_dim=16, depth=1, num_heads=2, mlp_dim=32,
                                        class_token=False, include_top=False, pooling="map", naflex=True,
                                        input_shape=(16, 16, 3))
    inputs = naflex_inputs(_images(), model, max_num_patches=24)
    model.save(tmp_path / "naflex.keras")
    loaded = keras.saving.load_model(tmp_path / "naflex.keras")
    np.testing.assert_allclose(keras.ops.convert_to_numpy(loaded(inputs)), keras.ops.convert_to_numpy(model(inputs)),
                               atol=1e-6, rtol=0)
    assert loaded.preprocessing == model.preprocessing


# Config fields that say who wrote the file, not what the model is.
_PROVENANCE = ("transformers_version", "architectures", "dtype", "torch_dtype", "_name_or_path")


def test_naflex_model_exports_to_transformers_and_reads_back_the_same(folder, tmp_path):
    """`export(format="hf")` of a NaFlex model: transformers' `Siglip2VisionModel` loads the folder and
    agrees with keras_vit on NaFlex inputs (images filling fewer patches than the budget among them);
    the folder read and written back (`export`, `keras-vit convert`) holds the same tensors and config."""
    from safetensors.numpy import load_file

    from keras_vit.cli import main

    path, _ = folder
    model = keras_vit.from_checkpoint(str(path))
    tokens_model = keras_vit.from_checkpoint(str(path), include_top=False, pooling=None)
    keras_vit.weights.export(model, tmp_path / "out", format="hf")
    exported = transformers.Siglip2VisionModel.from_pretrained(tmp_path / "out").eval()
    for budget in (40, 64):
        inputs = naflex_inputs(_images(), model, max_num_patches=budget)
        assert (inputs["mask"].sum(1) < budget).any()
        expected, valid = _reference(exported, inputs), inputs["mask"].astype(bool)
        np.testing.assert_allclose(keras.ops.convert_to_numpy(model(inputs)), expected.pooler_output.numpy(),
                                   atol=TOLERANCE, rtol=0)
        tokens = keras.ops.convert_to_numpy(tokens_model(inputs))
        np.testing.assert_allclose(tokens[valid], expected.last_hidden_state.numpy()[valid], atol=TOLERANCE, rtol=0)
    assert main(["convert", str(path), str(tmp_path / "converted"), "--format", "hf"]) == 0
    original = load_file(str(path / "model.safetensors"))
    for name in ("out", "converted"):
        written = load_file(str(tmp_path / name / "model.safetensors"))
        assert written.keys() == original.keys()
        for key, value in original.items():
            np.testing.assert_allclose(written[key], value, atol=1e-7, rtol=0, err_msg=key)
        configs = [transformers.Siglip2VisionConfig.from_pretrained(f).to_dict() for f in (path, tmp_path / name)]
        assert [{k: v for k, v in c.items() if k not in _PROVENANCE} for c in configs][0] == \
            {k: v for k, v in configs[1].items() if k not in _PROVENANCE}
    processor = transformers.Siglip2ImageProcessor.from_pretrained(tmp_path / "out")
    assert (processor.patch_size, processor.max_num_patches) == (TINY["patch_size"], TINY["num_patches"])


@pytest.mark.backend_independent
@pytest.mark.parametrize("patch_size", [2, 8])  # 2: 48 = 2 x 2 x 12 was read as 12 channels
def test_a_patch_size_that_contradicts_the_embedding_is_refused(folder, tmp_path, patch_size):
    """`config.json`'s `patch_size` against the patch embedding's inputs (4 x 4 x 3 = 48): one line, never a model
    that cuts the images into other patches."""
    import json
    import shutil

    shutil.copytree(folder[0], tmp_path / "model")
    config = json.loads((tmp_path / "model" / "config.json").read_text())
    (tmp_path / "model" / "config.json").write_text(json.dumps({**config, "patch_size": patch_size}))
    with pytest.raises(ValueError, match=f"48 inputs, not patch_size={patch_size} squared times 3 channels") as refused:
        keras_vit.from_checkpoint(str(tmp_path / "model"))
    assert "\n" not in str(refused.value)
