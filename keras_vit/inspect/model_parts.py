"""Finds the named parts of a keras_vit model, with a clear error for other models."""

import numpy as np

REQUIRED = ("embedding", "posembed_input", "encoder")


def _layer(model, name):
    try:
        return model.get_layer(name)
    except ValueError:
        raise ValueError(
            f"Model {model.name!r} has no layer {name!r}; this needs a keras_vit Vision "
            f"Transformer (layers {', '.join(repr(n) for n in REQUIRED)})."
        ) from None


def vit_part(model):
    """The Vision Transformer whose layers `model` holds: `model` itself, or a dense model's
    (`keras_vit.DenseModel`) sub-model "backbone"."""
    names = [layer.name for layer in model.layers]
    return model.get_layer("backbone") if "embedding" not in names and "backbone" in names else model


DENSE_HEADS = ("linear_head", "dpt_head")  # `keras_vit.DenseModel`'s head layers; EoMT's is "eomt_head"


def dense_task(model):
    """What a dense model predicts: "semantic" (per-pixel logits), "depth", "eomt" (EoMT's class
    and mask logits per query); None for any other model."""
    names = [layer.name for layer in model.layers]
    if "eomt_head" in names:
        return "eomt"
    head = next((name for name in DENSE_HEADS if name in names), None)
    return model.get_layer(head).task if head else None


def input_step(model):
    """What an input side must be a multiple of: the patch size (times a hybrid stem's stride)."""
    vit = vit_part(model)
    stem = next((layer for layer in vit.layers if layer.name == "stem"), None)
    return embedding_layer(vit).patch_size * (stem.stride if stem is not None else 1)


def embedding_layer(model):
    return _layer(model, "embedding")


def position_layer(model):
    return _layer(model, "posembed_input")


def prefix_tokens(model):
    """Tokens before the patch tokens: class, distillation and register tokens."""
    names = [layer.name for layer in model.layers]
    registers = model.get_layer("registers").num_tokens if "registers" in names else 0
    return position_layer(model).num_prefix_tokens + registers


def has_class_token(model):
    return "class_token" in [layer.name for layer in model.layers]


def encoder_layer(model):
    return _layer(model, "encoder")


def is_naflex(model):
    """Whether `model` takes NaFlex inputs (`naflex=True`: patches, spatial shapes, mask)."""
    try:
        return type(model.get_layer("posembed_input")).__name__ == "NaFlexPositionEmbedding"
    except ValueError:  # not a keras_vit model: the callers say so
        return False


def encoder_inputs(model):
    """The encoder's input tokens and the keyword arguments its blocks take with them:
    `{"rope": coordinates}` for `position_embedding="rope"`, `{"valid": mask}` for NaFlex, else `{}`."""
    inputs = encoder_layer(model).input
    if not isinstance(inputs, (list, tuple)):
        return inputs, {}
    return inputs[0], {"valid" if is_naflex(model) else "rope": inputs[1]}


def check_images(images):
    """`images` as a float32 `(batch, height, width, channels)` array, or a clear error."""
    images = np.asarray(images, dtype="float32")
    if images.ndim != 4:
        raise ValueError(
            f"images must be a batch (batch, height, width, channels), got shape {images.shape}; "
            "add a leading axis for a single image."
        )
    return images


NAFLEX_INPUTS = ("patches", "spatial_shapes", "mask")


def check_naflex_inputs(inputs):
    """A NaFlex model's input dict (`keras_vit.naflex_inputs`) as NumPy arrays, or a clear error."""
    if not isinstance(inputs, dict) or set(inputs) != set(NAFLEX_INPUTS):
        raise ValueError(f"A NaFlex model takes a dict with the keys {NAFLEX_INPUTS} (keras_vit.naflex_inputs), got "
                         f"{sorted(inputs) if isinstance(inputs, dict) else type(inputs).__name__}.")
    return {key: np.asarray(value) for key, value in inputs.items()}
