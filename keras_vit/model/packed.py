"""A NaFlex model on packed batches (`keras_vit.data.packing`: several images in one
sequence): `packed_model(model)` runs the model's own layers, each token attending only to
its own image's tokens (a block-diagonal mask) and the pooling (MAP or average) giving one
vector per image, `(rows, images, ...)`; `keras_vit.data.packing.unpack` puts them back in
the order of the images.
"""

import keras

from keras_vit.model.logits import ends_with_softmax
from keras_vit.layers.naflex import segment_membership

PACKED_LAYERS = ("fc_norm", "projection", "pre_logits", "head", "predictions")  # after the pooling, where the model has them


def packed_model(model, logits=False):
    """A model on packed batches (see the module docstring) sharing every layer and weight of
    the NaFlex `model` (`naflex=True`); its outputs are `(rows, images, ...)`. With `logits`,
    a final softmax is left out and the outputs are float32 (a training loss from logits)."""
    if not (isinstance(model.input, dict) and "spatial_shapes" in model.input):
        raise ValueError(f"packed_model needs a NaFlex model (naflex=True); {model.name!r} takes images.")
    names = {layer.name for layer in model.layers}
    patch_dim = model.input["patches"].shape[-1]
    inputs = {
        "patches": keras.Input(shape=(None, patch_dim), name="patches"),
        "spatial_shapes": keras.Input(shape=(None, 2), dtype="int32", name="spatial_shapes"),
        "segment_ids": keras.Input(shape=(None,), dtype="int32", name="segment_ids"),
    }
    ids = inputs["segment_ids"]
    tokens = model.get_layer("embedding")(inputs["patches"], ids)  # padding (id 0) selected out
    tokens = model.get_layer("posembed_input")(tokens, inputs["spatial_shapes"], segment_ids=ids)
    tokens = model.get_layer("dropout")(tokens)
    if "pre_norm" in names:
        tokens = model.get_layer("pre_norm")(tokens)
    outputs = model.get_layer("encoder")(tokens, segment_ids=ids)
    pooling = "map_head" if "map_head" in names else "pooling" if "pooling" in names else None
    if pooling is not None:
        members = keras.layers.Lambda(
            lambda pair: segment_membership(pair[1], keras.ops.shape(pair[0])[1]), name="segments",
        )([inputs["spatial_shapes"], ids])
        outputs = model.get_layer(pooling)(outputs, segments=members)
        for name in PACKED_LAYERS:
            if name in names and not (logits and name == model.layers[-1].name and ends_with_softmax(model)):
                outputs = model.get_layer(name)(outputs)
    if logits:
        outputs = keras.layers.Activation("linear", dtype="float32", name="logits")(outputs)
    return keras.Model(inputs, outputs, name=f"{model.name}_packed")
