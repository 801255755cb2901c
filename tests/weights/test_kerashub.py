"""KerasHub interop, checked against keras-hub itself: its ViT presets, `.weights.h5` and `.keras` files
load into keras_vit, and keras_vit's "kerashub" export loads in `from_preset`, with the same
features and logits (random weights, every backend)."""

import json
import os
import stat

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.weights import convert_checkpoint, export, read_checkpoint
from tests.support.models import randomize
from tests.support.checkpoints import TINY, original_npz_params, randomize_hf_model

keras_hub = pytest.importorskip("keras_hub")

HUB = dict(image_shape=(16, 16, 3), patch_size=4, num_layers=2, num_heads=2, hidden_dim=32, mlp_dim=64)
VIT = dict(patch_size=4, hidden_dim=32, depth=2, num_heads=2, mlp_dim=64, input_shape=(16, 16, 3))
CLASSES = 5


def numpy(x):
    return np.asarray(keras.ops.convert_to_numpy(x))


def hub_backbone(seed, **config):
    return randomize(keras_hub.models.ViTBackbone(**{**HUB, **config}), seed=seed)


def hub_classifier(seed, **task):
    backbone = keras_hub.models.ViTBackbone(**HUB)
    return randomize(keras_hub.models.ViTImageClassifier(backbone=backbone, num_classes=CLASSES, **task), seed=seed)


def save(hub_model, folder, kind):
    """`hub_model` as a preset folder, a bare `.weights.h5` or a `.keras` file; returns the path."""
    if kind == "preset":
        hub_model.save_to_preset(str(folder))
        return folder
    if kind == "keras":
        hub_model.save(str(folder.with_suffix(".keras")))
        return folder.with_suffix(".keras")
    path = folder.with_suffix(".weights.h5")
    hub_model.save_weights(str(path))
    return path


@pytest.fixture
def x(rng):
    return rng.uniform(-1, 1, (2, 16, 16, 3)).astype(np.float32)


@pytest.fixture
def pixels(rng):
    return rng.integers(0, 256, (2, 16, 16, 3)).astype(np.float32)


# ------------------------------------------------------------------ keras-hub -> keras_vit


@pytest.mark.parametrize("kind", ["preset", "weights_h5"])
def test_backbone_loads_with_the_same_features(kind, tmp_path, x):
    hub = hub_backbone(1)
    path = save(hub, tmp_path / "backbone", kind)
    assert read_checkpoint(path, num_heads=2).format == "kerashub"
    model = keras_vit.VisionTransformer(**VIT, include_top=False, weights=str(path))
    assert model.get_layer("encoder").blocks[0].approximate_gelu is False  # keras-hub's exact GELU
    reference = numpy(hub(x))
    assert reference.shape == (2, 17, 32)
    np.testing.assert_allclose(numpy(model(x)), reference, atol=1e-5, rtol=0)


@pytest.mark.parametrize("kind", ["preset", "weights_h5", "keras"])
@pytest.mark.parametrize("intermediate_dim", [None, 8])
def test_classifier_loads_with_the_same_logits(kind, intermediate_dim, tmp_path, x):
    hub = hub_classifier(2, intermediate_dim=intermediate_dim)
    path = save(hub, tmp_path / "classifier", kind)
    model = keras_vit.VisionTransformer(
        **VIT, classes=CLASSES, representation_size=intermediate_dim, classifier_activation=None, weights=str(path)
    )
    reference = numpy(hub(x))
    assert np.abs(reference).max() > 0.5  # not a comparison of near-zero numbers
    np.testing.assert_allclose(numpy(model(x)), reference, atol=1e-5, rtol=0)


def test_preset_records_the_architecture(tmp_path, x):
    """A preset's config.json gives heads, epsilon and resolution: the generic builder with
    other defaults takes them from the checkpoint."""
    hub = hub_backbone(3, image_shape=(20, 12, 3), num_heads=4, layer_norm_epsilon=1e-5)
    hub.save_to_preset(str(tmp_path / "preset"))
    model = keras_vit.VisionTransformer(
        patch_size=4, hidden_dim=32, depth=2, num_heads=4, mlp_dim=64, include_top=False,
        weights=str(tmp_path / "preset"),
    )
    assert model.input_shape == (None, 20, 12, 3)
    assert model.get_layer("encoder").blocks[0].layer_norm_epsilon == 1e-5
    wide = np.concatenate([x, x[:, :4]], axis=1)[:, :, :12]
    np.testing.assert_allclose(numpy(model(wide)), numpy(hub(wide)), atol=1e-5, rtol=0)


def test_convert_to_keras_files(tmp_path, x):
    """keras-hub -> keras_vit's `.keras`: a backbone stays a token sequence, a classifier keeps its head."""
    hub = hub_backbone(12)
    hub.save_to_preset(str(tmp_path / "backbone"))
    convert_checkpoint(str(tmp_path / "backbone"), tmp_path / "backbone.keras", num_heads=2)
    model = keras.saving.load_model(tmp_path / "backbone.keras")
    np.testing.assert_allclose(numpy(model(x)), numpy(hub(x)), atol=1e-5, rtol=0)
    classifier = hub_classifier(13, intermediate_dim=8)
    classifier.save_to_preset(str(tmp_path / "classifier"))
    convert_checkpoint(str(tmp_path / "classifier"), tmp_path / "classifier.keras")
    model = keras.saving.load_model(tmp_path / "classifier.keras")
    np.testing.assert_allclose(numpy(model(x)), numpy(keras.ops.softmax(classifier(x))), atol=1e-5, rtol=0)


def test_preset_without_biases_gets_zero_biases(tmp_path, x):
    hub = hub_backbone(11, use_mha_bias=False, use_mlp_bias=False, use_patch_bias=False)
    hub.save_to_preset(str(tmp_path / "preset"))
    model = keras_vit.VisionTransformer(**VIT, include_top=False, weights=str(tmp_path / "preset"))
    np.testing.assert_allclose(numpy(model(x)), numpy(hub(x)), atol=1e-5, rtol=0)


def test_keras_vit_weights_h5_is_not_taken_for_keras_hub(tmp_path, x):
    """Both are Keras `.weights.h5` files: the keys tell them apart."""
    model = randomize(keras_vit.VisionTransformer(**VIT, classes=CLASSES, approximate_gelu=False), seed=4)
    model.save_weights(str(tmp_path / "ours.weights.h5"))
    assert read_checkpoint(tmp_path / "ours.weights.h5", num_heads=2).format == "keras"
    again = keras_vit.VisionTransformer(
        **VIT, classes=CLASSES, approximate_gelu=False, weights=str(tmp_path / "ours.weights.h5")
    )
    np.testing.assert_array_equal(numpy(again(x)), numpy(model(x)))


# ------------------------------------------------------------------ keras_vit -> keras-hub


@pytest.mark.parametrize("representation_size", [None, 8])
def test_export_loads_in_keras_hub_classifier(representation_size, tmp_path, pixels):
    model = randomize(
        keras_vit.VisionTransformer(
            **VIT, classes=CLASSES, representation_size=representation_size, classifier_activation=None,
            approximate_gelu=False,
        ),
        seed=5,
    )
    folder = tmp_path / "preset"
    export(model, folder, format="kerashub")
    hub = keras_hub.models.ViTImageClassifier.from_preset(str(folder))
    expected = numpy(model(keras_vit.preprocess_input(pixels)))
    assert np.abs(expected).max() > 0.2  # not a comparison of near-zero numbers
    # predict() runs the preset's image converter: preprocessing matches preprocess_input
    np.testing.assert_allclose(numpy(hub.predict(pixels, verbose=0)), expected, atol=1e-5, rtol=0)
    mask = 0o666 & ~_umask()
    for name in os.listdir(folder):
        assert stat.S_IMODE(os.stat(folder / name).st_mode) == mask, name
    assert sorted(os.listdir(tmp_path)) == ["preset"]  # nothing half-written left beside it


def test_export_without_head_loads_in_keras_hub_backbone(tmp_path, pixels):
    model = randomize(keras_vit.VisionTransformer(**VIT, include_top=False, approximate_gelu=False), seed=6)
    folder = tmp_path / "backbone"
    export(model, folder, format="kerashub")
    hub = keras_hub.models.ViTBackbone.from_preset(str(folder))
    x = keras_vit.preprocess_input(pixels)
    np.testing.assert_allclose(numpy(hub(x)), numpy(model(x)), atol=1e-5, rtol=0)
    converter = keras_hub.layers.ViTImageConverter.from_preset(str(folder))
    np.testing.assert_allclose(numpy(converter(pixels)), x, atol=1e-6, rtol=0)
    config = json.loads((folder / "config.json").read_text())
    assert config["registered_name"] == "keras_hub>ViTBackbone"
    assert not (folder / "task.json").exists()


def test_export_round_trip_back_into_keras_vit(tmp_path, x):
    model = randomize(
        keras_vit.VisionTransformer(**VIT, classes=CLASSES, representation_size=8, approximate_gelu=False), seed=7
    )
    export(model, tmp_path / "preset", format="kerashub")
    back = keras_vit.VisionTransformer(**VIT, classes=CLASSES, representation_size=8, weights=str(tmp_path / "preset"))
    np.testing.assert_array_equal(numpy(back(x)), numpy(model(x)))


def hf_config():
    transformers = pytest.importorskip("transformers")
    return transformers.ViTConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, image_size=16,
        patch_size=4, num_labels=CLASSES, layer_norm_eps=1e-6, hidden_act="gelu",
    )


def test_convert_hf_folder_to_keras_hub(tmp_path, rng):
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    from keras_vit.cli import main

    hf = randomize_hf_model(transformers.ViTForImageClassification(hf_config()).eval(), seed=8)
    hf.save_pretrained(tmp_path / "hf")
    assert main(["convert", str(tmp_path / "hf"), str(tmp_path / "preset"), "--format", "kerashub"]) == 0
    x = rng.uniform(-1, 1, (2, 16, 16, 3)).astype(np.float32)
    with torch.no_grad():
        reference = hf(pixel_values=torch.from_numpy(x.transpose(0, 3, 1, 2))).logits.numpy()
    hub = keras_hub.models.ViTImageClassifier.from_preset(str(tmp_path / "preset"))
    np.testing.assert_allclose(numpy(hub(x)), reference, atol=1e-5, rtol=0)


# ------------------------------------------------------------------------------- errors


def test_keras_hub_model_without_class_token_is_refused(tmp_path, capsys):
    from keras_vit.cli import main

    hub_backbone(9, use_class_token=False).save_to_preset(str(tmp_path / "gap"))
    with pytest.raises(ValueError, match="class token") as info:
        keras_vit.VisionTransformer(**VIT, include_top=False, weights=str(tmp_path / "gap"))
    assert "\n" not in str(info.value)
    assert main(["convert", str(tmp_path / "gap"), str(tmp_path / "out.npz")]) == 2
    err = capsys.readouterr().err
    assert "class token" in err and "Traceback" not in err


def test_keras_hub_gap_classifier_is_refused(tmp_path):
    hub_classifier(10, pooling="gap").save_to_preset(str(tmp_path / "gap"))
    with pytest.raises(ValueError, match="gap") as info:
        keras_vit.VisionTransformer(**VIT, classes=CLASSES, weights=str(tmp_path / "gap"))
    assert "\n" not in str(info.value)


def test_export_refuses_what_keras_hub_cannot_compute(tmp_path, rng, capsys):
    """keras-hub's ViT runs the exact GELU (a tanh-GELU model, as from the original npz files, is
    refused), and its head reads the class token (an average-pooled head is refused)."""
    from keras_vit.cli import main

    tanh = keras_vit.VisionTransformer(**VIT, classes=CLASSES, approximate_gelu=True)
    with pytest.raises(ValueError, match="approximate_gelu=False"):
        export(tanh, tmp_path / "tanh", format="kerashub")
    avg = keras_vit.VisionTransformer(**VIT, classes=CLASSES, approximate_gelu=False, pooling="avg")
    with pytest.raises(ValueError, match="pooling='avg'"):
        export(avg, tmp_path / "avg", format="kerashub")
    hybrid = keras_vit.VisionTransformer(
        **{**VIT, "patch_size": 1}, classes=CLASSES, approximate_gelu=False,
        stem=keras_vit.layers.ResNetV2Stem(stages=(1, 1), width=32),
    )
    with pytest.raises(ValueError, match="no hybrid stem"):
        export(hybrid, tmp_path / "hybrid", format="kerashub")
    np.savez(tmp_path / "orig.npz", **original_npz_params(rng, **TINY, classes=CLASSES))
    assert main(["convert", str(tmp_path / "orig.npz"), str(tmp_path / "out"), "--format", "kerashub"]) == 2
    err = capsys.readouterr().err
    assert "tanh-approximate GELU" in err and "Traceback" not in err
    assert sorted(os.listdir(tmp_path)) == ["orig.npz"]


def test_convert_refuses_pre_logits_without_head(tmp_path, capsys):
    """A transformers ViTModel's pooler is keras_vit's pre_logits, which a ViTBackbone cannot hold."""
    transformers = pytest.importorskip("transformers")
    from keras_vit.cli import main

    transformers.ViTModel(hf_config(), add_pooling_layer=True).save_pretrained(tmp_path / "hf")
    assert main(["convert", str(tmp_path / "hf"), str(tmp_path / "preset"), "--format", "kerashub"]) == 2
    err = capsys.readouterr().err
    assert "no pre_logits layer" in err and "Traceback" not in err
    assert not (tmp_path / "preset").exists()


def test_convert_refuses_an_existing_folder(tmp_path, capsys):
    from keras_vit.cli import main

    model = keras_vit.VisionTransformer(**VIT, classes=CLASSES, approximate_gelu=False)
    export(model, tmp_path / "preset", format="kerashub")
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "mine.txt").write_text("keep")
    assert main(["convert", str(tmp_path / "preset"), str(tmp_path / "taken"), "--format", "kerashub"]) == 2
    assert "already exists" in capsys.readouterr().err
    assert (tmp_path / "taken" / "mine.txt").read_text() == "keep"
    convert_checkpoint(str(tmp_path / "preset"), tmp_path / "taken", format="kerashub", overwrite=True)
    assert not (tmp_path / "taken" / "mine.txt").exists()


def _umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask
