"""Finds the named parts of a keras_vit model, with a clear error for other models."""

REQUIRED = ("embedding", "posembed_input", "encoder")


def _layer(model, name):
    try:
        return model.get_layer(name)
    except ValueError:
        raise ValueError(
            f"Model {model.name!r} has no layer {name!r}; keras_vit.inspect needs a keras_vit "
            f"Vision Transformer (layers {', '.join(repr(n) for n in REQUIRED)})."
        ) from None


def embedding_layer(model):
    return _layer(model, "embedding")


def position_layer(model):
    return _layer(model, "posembed_input")


def encoder_layer(model):
    return _layer(model, "encoder")

