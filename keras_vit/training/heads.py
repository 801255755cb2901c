"""Whether a classifier outputs probabilities or logits, and its logits model (no TensorFlow,
so that `predict` needs none)."""

import keras

from keras_vit.torch_compile import compile_once


def _ends_with(model, activation):
    last = model.layers[-1]
    return isinstance(last, keras.layers.Activation) and last.activation is activation


def ends_with_softmax(model):
    """True if the model's last layer is a softmax `Activation` (it outputs probabilities)."""
    return _ends_with(model, keras.activations.softmax)


def logits_model(model):
    """`(training_model, from_logits)`: the model without its final softmax where it has one.

    The loss is then computed from float32 logits (stable under mixed precision); the
    training model shares all layers (and weights) with `model`.
    """
    if ends_with_softmax(model):
        logits = keras.layers.Activation("linear", dtype="float32", name="logits")(model.layers[-1].input)
        return compile_once(keras.Model(model.inputs, logits, name=f"{model.name}_logits")), True
    return model, _ends_with(model, keras.activations.linear)
