"""What a checkpoint records besides its tensors is builder arguments named as `ViTConfig` fields,
validated by `ViTConfig`'s declarations; "the checkpoint's own" is resolved in one step
(`model_config.resolve_own`), which refuses a model that differs from what the file records."""

import numpy as np
import pytest

import keras_vit
from keras_vit.config.vit_config import ViTConfig, resolve_own
from keras_vit.weights.canonical import Metadata, check_metadata

TINY = dict(patch_size=4, hidden_dim=16, depth=1, num_heads=2, mlp_dim=32, include_top=False, pooling="avg")


@pytest.mark.backend_independent
def test_metadata_holds_config_fields_checked_by_their_declarations():
    with pytest.raises(TypeError, match=r"\['rope_period'\] are not ViTConfig fields"):
        Metadata(rope_period=100.0)
    with pytest.raises(ValueError, match=r"^f.bin: its configuration records rope_theta=-1.0 must be in \(0, inf\)\.$"):
        check_metadata(Metadata(rope_theta=-1.0), "f.bin")
    with pytest.raises(ValueError, match=r"Unknown rope_form='spiral'; expected one of dinov3, axial, mixed"):
        check_metadata(Metadata(rope_form="spiral"), "f.bin")
    meta = Metadata(num_heads=2, grid=(4, 4), rope_theta=10.0, quick_gelu=None)
    assert meta.options == {"rope_theta": 10.0} and meta.rope_theta == 10.0 and meta.quick_gelu is None
    check_metadata(meta, "f.bin")


@pytest.mark.backend_independent
def test_the_checkpoints_own_values_fill_what_the_builder_leaves_none():
    config = resolve_own(ViTConfig(**TINY), {"approximate_gelu": False, "layer_norm_epsilon": 1e-5, "quick_gelu": None})
    assert (config.approximate_gelu, config.layer_norm_epsilon, config.quick_gelu, config.num_registers) == (
        False, 1e-5, False, 0)
    given = resolve_own(ViTConfig(**TINY, approximate_gelu=True), {"approximate_gelu": False})
    assert given.approximate_gelu is True  # a numerics option given by the caller wins
    plain = resolve_own(ViTConfig(**TINY))
    assert (plain.approximate_gelu, plain.layer_norm_epsilon, plain.quick_gelu) == (True, 1e-6, False)


@pytest.fixture(scope="module")
def rope_file(tmp_path_factory):
    """A `.keras` file of a tiny axial-rope model of period 10."""
    model = keras_vit.VisionTransformer(**TINY, position_embedding="rope", rope_form="axial", rope_theta=10.0,
                                        input_shape=(16, 16, 3), weights=None)
    path = tmp_path_factory.mktemp("rope") / "rope.keras"
    model.save(path)
    return path, model


def test_a_builder_given_weights_takes_their_values_or_refuses_a_conflict_in_one_line(rope_file):
    path, reference = rope_file
    with pytest.raises(ValueError) as error:
        keras_vit.VisionTransformer(**TINY, position_embedding="rope", rope_form="axial", weights=str(path))
    message = str(error.value)
    assert "\n" not in message and "rope_theta=10.0" in message and "rope_theta=100.0" in message, message
    model = keras_vit.VisionTransformer(**TINY, position_embedding="rope", rope_form="axial", rope_theta=10.0,
                                        weights=str(path), input_shape=(16, 16, 3))
    image = np.random.default_rng(0).uniform(-1, 1, (2, 16, 16, 3)).astype("float32")
    np.testing.assert_allclose(model.predict(image, verbose=0), reference.predict(image, verbose=0), atol=1e-6)
