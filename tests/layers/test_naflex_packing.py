"""Packing NaFlex images (`keras_vit.data.packing`): a packed batch (several images per sequence,
attention within each image only, pooling per image) gives each image the outputs of the
unpacked NaFlex batch within 1e-5 in float32, with MAP and average pooling; the `valid=` path
is unchanged; a token attending across images is caught."""

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.data import packing
from keras_vit.model.packed import packed_model
from keras_vit.layers import Encoder
from tests.support.naflex import budget_batch

PATCH, SEQ_LEN = 4, 16
BUDGETS = (4, 6, 9, 16, 3, 7, 2, 5)  # each image fills its own budget, all padded to SEQ_LEN


def _batch():
    """A NaFlex batch of images at their own aspect ratios, most filling fewer than SEQ_LEN patches."""
    return budget_batch(BUDGETS, SEQ_LEN, PATCH)


def _model(**head):
    keras.utils.set_random_seed(1)
    return keras_vit.VisionTransformer(patch_size=PATCH, hidden_dim=16, depth=2, num_heads=2, mlp_dim=32,
                                       class_token=False, naflex=True, input_shape=(16, 16, 3), **head)


@pytest.mark.parametrize("head", [dict(include_top=False, pooling="map"), dict(classes=5, pooling="avg"),
                                  dict(classes=5, pooling="map", classifier_activation="softmax"),
                                  dict(include_top=False, pooling="avg", pre_norm=True, projection_dim=8)])
def test_packed_batch_gives_each_image_its_unpacked_outputs(head):
    model, batch = _model(**head), _batch()
    for layer in model.layers:  # non-zero heads, so the comparison sees them
        if layer.name == "head":
            layer.kernel.assign(np.random.default_rng(2).normal(size=layer.kernel.shape) * 0.5)
    packed, index = packing.pack(batch)
    assert len(packed["patches"]) < len(BUDGETS)  # several images share a row
    expected = keras.ops.convert_to_numpy(model(batch))
    outputs = keras.ops.convert_to_numpy(packed_model(model)(packed))
    np.testing.assert_allclose(packing.unpack(outputs, index), expected, atol=1e-5, rtol=1e-5)


def test_a_token_attending_across_images_changes_the_outputs():
    """The packed tokens, run with attention over the whole row (`valid=` mask of every image
    token), differ from the per-image outputs: the equality above needs the block-diagonal mask."""
    model, batch = _model(include_top=False, pooling="avg"), _batch()
    packed, index = packing.pack(batch)
    encoder = model.get_layer("encoder")
    tokens = model.get_layer("posembed_input")(model.get_layer("embedding")(packed["patches"]),
                                               packed["spatial_shapes"], segment_ids=packed["segment_ids"])
    within = keras.ops.convert_to_numpy(encoder(tokens, segment_ids=packed["segment_ids"]))
    across = keras.ops.convert_to_numpy(encoder(tokens, valid=packed["segment_ids"] > 0))
    first = packed["segment_ids"] == 1
    assert np.abs(within - across)[first].max() > 1e-3


def test_explicit_attention_weights_are_block_diagonal():
    ids = np.array([[1, 1, 2, 2, 2, 0]], np.int32)
    encoder = Encoder(1, 2, 16)
    x = np.random.default_rng(0).normal(size=(1, 6, 8)).astype("float32")
    fused = keras.ops.convert_to_numpy(encoder(x, segment_ids=ids))
    explicit, weights = encoder(x, segment_ids=ids, return_attention_weights=True)
    weights = keras.ops.convert_to_numpy(weights[0])[0]  # (heads, 6, 6)
    same = ids[0][:, None] == ids[0][None, :]
    assert np.abs(weights[:, ~same]).max() == 0
    np.testing.assert_allclose(weights.sum(-1), 1.0, rtol=1e-6)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(explicit), fused, atol=1e-5)


def test_first_fit_and_its_refusals():
    assert packing.first_fit([10, 7, 6, 3, 9], 16) == [[0, 2], [1, 3], [4]]
    assert packing.first_fit([4, 4, 4], 16, max_images=2) == [[0, 1], [2]]
    with pytest.raises(ValueError, match="Image 1 has 17 patches; a packed sequence holds 1 to 16"):
        packing.first_fit([3, 17], 16)
    square = keras_vit.VisionTransformer(patch_size=4, hidden_dim=16, depth=1, num_heads=2, mlp_dim=32,
                                         input_shape=(8, 8, 3), classes=3)
    with pytest.raises(ValueError, match="packed_model needs a NaFlex model"):
        packed_model(square)
