"""Whether a classifier outputs probabilities or logits, and its logits (no TensorFlow, so
that `predict` needs none)."""

import keras


def _ends_with(model, activation):
    last = model.layers[-1]
    return isinstance(last, keras.layers.Activation) and last.activation is activation


def ends_with_softmax(model):
    """True if the model's last layer is a softmax `Activation` (it outputs probabilities)."""
    return _ends_with(model, keras.activations.softmax)


def logits_output(model):
    """`(logits, from_logits)`: `model`'s output without its final softmax where it has one.

    The loss is then computed from float32 logits (stable under mixed precision); a training
    model on these outputs shares all layers (and weights) with `model`.
    """
    if ends_with_softmax(model):
        return keras.layers.Activation("linear", dtype="float32", name="logits")(model.layers[-1].input), True
    return model.outputs[0], _ends_with(model, keras.activations.linear)
