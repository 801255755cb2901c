"""KerasHub presets of DeiT, DINOv2 and the SigLIP image tower, saved by keras-hub with random
weights, load into keras_vit with the outputs of the model keras-hub's `from_preset` rebuilds
(every backend)."""

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.weights import read_checkpoint
from tests.support.models import randomize

keras_hub = pytest.importorskip("keras_hub")

SIZE = dict(patch_size=4, num_layers=2, hidden_dim=32, num_heads=2, intermediate_dim=64, image_shape=(16, 16, 3))
CLASSES = 5


def numpy(x):
    return np.asarray(keras.ops.convert_to_numpy(x))


def _close(actual, expected):
    expected = numpy(expected)
    assert np.abs(expected).max() > 0.5  # not a comparison of near-zero numbers
    np.testing.assert_allclose(numpy(actual), expected, atol=1e-5, rtol=0)


def _preset(model, folder):
    """`model` saved as a keras-hub preset; returns the folder and the model `from_preset` rebuilds."""
    model.save_to_preset(str(folder))
    return str(folder), type(model).from_preset(str(folder))


@pytest.fixture
def x(rng):
    return rng.uniform(-1, 1, (2, 16, 16, 3)).astype(np.float32)


def _dinov2(seed, **config):
    return randomize(keras_hub.models.DINOV2Backbone(**SIZE, position_embedding_shape=(16, 16, 3), **config), seed=seed)


@pytest.mark.parametrize("config", [{}, dict(num_register_tokens=3, use_swiglu_ffn=True, use_mask_token=False)])
def test_dinov2_preset(config, tmp_path, x):
    folder, hub = _preset(_dinov2(1, **config), tmp_path / "dinov2")
    ckpt = read_checkpoint(folder)
    assert (ckpt.format, ckpt.num_registers, ckpt.mlp) == (
        "kerashub_dinov2", config.get("num_register_tokens", 0), "swiglu" if config else "gelu")
    model = keras_vit.from_checkpoint(folder)
    assert model.preprocessing == "dinov2" and model.get_layer("encoder").blocks[0].approximate_gelu is False
    _close(model(x), hub(x))


def test_dinov2_weights_h5_of_a_named_backbone(tmp_path, x):
    """A rebuilt backbone's layers carry its name (`dinov2_backbone_embeddings`); a bare
    `.weights.h5` records no heads: the builder's are used."""
    _, hub = _preset(_dinov2(2, num_register_tokens=1), tmp_path / "dinov2")
    hub.save_weights(str(tmp_path / "dinov2.weights.h5"))
    model = keras_vit.VisionTransformer(
        patch_size=4, hidden_dim=32, depth=2, num_heads=2, mlp_dim=64, num_registers=1, layer_scale_init=1.0,
        input_shape=(16, 16, 3), include_top=False, approximate_gelu=False, weights=str(tmp_path / "dinov2.weights.h5"),
    )
    _close(model(x), hub(x))


def _deit_backbone(seed):
    return randomize(keras_hub.models.DeiTBackbone(**SIZE), seed=seed)


def test_deit_backbone_preset(tmp_path, x):
    folder, hub = _preset(_deit_backbone(3), tmp_path / "deit")
    model = keras_vit.from_checkpoint(folder)
    assert read_checkpoint(folder).distillation_token and model.preprocessing == "deit"
    _close(model(x), hub(x))


@pytest.mark.parametrize("kind", ["preset", "keras"])
def test_deit_classifier_reads_the_class_token(kind, tmp_path, x):
    classifier = keras_hub.models.DeiTImageClassifier(backbone=_deit_backbone(4), num_classes=CLASSES)
    classifier = randomize(classifier, seed=4)
    if kind == "preset":
        path, hub = _preset(classifier, tmp_path / "deit")
    else:
        path, hub = str(tmp_path / "deit.keras"), classifier
        classifier.save(path)
    model = keras_vit.from_checkpoint(path, classifier_activation=None)
    assert "head_dist" not in [layer.name for layer in model.layers]
    _close(model(x), hub(x))


@pytest.mark.parametrize("hub_model, message", [
    (lambda: keras_hub.models.DeiTImageClassifier(keras_hub.models.DeiTBackbone(**SIZE), CLASSES, pooling="gap"),
     r"pooling='gap' .*keras_vit's head reads the class token"),
    (lambda: keras_hub.models.DeiTBackbone(**SIZE, use_mha_bias=False), r"use_mha_bias=False"),
    (lambda: keras_hub.models.SigLIPVisionEncoder(**SIZE, intermediate_activation="relu"),
     r"intermediate_activation='relu'; keras_vit's MLP runs"),
    (lambda: keras_hub.models.SigLIPVisionEncoder(**SIZE, layer_norm_epsilon=1e-5), r"share one epsilon"),
], ids=["deit_gap", "deit_no_bias", "siglip_relu", "siglip_epsilon"])
def test_what_keras_vit_cannot_run_exactly_is_refused_in_one_line(hub_model, message, tmp_path):
    hub_model().save_to_preset(str(tmp_path / "preset"))
    with pytest.raises(ValueError, match=message) as error:
        keras_vit.from_checkpoint(str(tmp_path / "preset"))
    assert "\n" not in str(error.value)


def _siglip_vision(seed, **config):
    encoder = randomize(keras_hub.models.SigLIPVisionEncoder(**SIZE, **config), seed=seed)
    encoder.embedding.position_ids.assign(np.arange(16)[None])  # integers: not weights to randomize
    return encoder


@pytest.mark.parametrize("activation", ["gelu_approximate", "gelu"])
def test_siglip_vision_encoder_preset(activation, tmp_path, x):
    folder, hub = _preset(_siglip_vision(5, intermediate_activation=activation), tmp_path / "siglip")
    model = keras_vit.from_checkpoint(folder)
    assert model.get_layer("encoder").blocks[0].approximate_gelu is (activation == "gelu_approximate")
    assert model.preprocessing == "siglip"
    _close(model(x), hub(x))  # the MAP head's pooled features


def test_siglip_backbone_preset_loads_its_image_tower(tmp_path, x):
    text = keras_hub.models.SigLIPTextEncoder(
        vocabulary_size=10, embedding_dim=32, hidden_dim=32, num_layers=1, num_heads=2, intermediate_dim=64)
    pair = keras_hub.models.SigLIPBackbone(_siglip_vision(6), randomize(text, seed=6))
    folder, hub = _preset(pair, tmp_path / "siglip")
    tokens = keras_vit.from_checkpoint(folder, pooling=None)
    assert tokens.output_shape == (None, 16, 32)
    _close(keras_vit.from_checkpoint(folder)(x), hub.vision_encoder(x))


@pytest.mark.parametrize("family", ["deit", "siglip"])
def test_bare_weights_h5_is_told_apart_by_its_layers(family, tmp_path, x):
    """No config: the family from the layers' names, heads from the caller, keras-hub's defaults."""
    hub = _deit_backbone(7) if family == "deit" else _siglip_vision(7)
    hub.save_weights(str(tmp_path / "hub.weights.h5"))
    assert read_checkpoint(str(tmp_path / "hub.weights.h5"), num_heads=2).format == f"kerashub_{family}"
    _close(keras_vit.from_checkpoint(str(tmp_path / "hub.weights.h5"), num_heads=2)(x), hub(x))
