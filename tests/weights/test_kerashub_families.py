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
    assert model.preprocessing == "dinov2" and model.get_layer("encoder").approximate_gelu is False
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
