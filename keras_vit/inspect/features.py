"""Intermediate features: the tokens after chosen encoder blocks (as timm's
`forward_intermediates` and transformers' `output_hidden_states`), from the model's own layers."""

import numbers

import keras
import numpy as np
from keras import ops

from keras_vit.inspect.model_parts import (
    check_images, check_naflex_inputs, embedding_layer, encoder_inputs, encoder_layer, is_naflex, prefix_tokens,
)
from keras_vit.layers.token_grid import TokenGrid


def _is_index(layers):
    return isinstance(layers, numbers.Integral) and not isinstance(layers, bool)


def block_indices(layers, depth):
    """`layers` (one block index, a sequence of them, or None for all; negative ones count
    from the end) as a list of indices in `0..depth-1`."""
    if layers is None:
        chosen = list(range(depth))
    elif _is_index(layers):
        chosen = [layers]
    elif isinstance(layers, (list, tuple, range, np.ndarray)) and len(layers):
        chosen = list(layers)
    else:
        raise ValueError(f"layers={layers!r}: expected a block index, a non-empty list of them, or None (all blocks).")
    for i in chosen:
        if isinstance(i, bool) or not isinstance(i, numbers.Integral) or not -depth <= i < depth:
            raise ValueError(
                f"layers={layers!r}: {i!r} is not one of the model's {depth} encoder blocks; expected "
                f"integers in 0..{depth - 1}, or -{depth}..-1 counted from the end."
            )
    return [int(i) % depth for i in chosen]


def feature_extractor(model, layers=None, *, norm=False, grid=False, name=None):
    """A `keras.Model` (sharing `model`'s layers and weights) from images to intermediate tokens.

    Args:
        model: a keras_vit Vision Transformer (plain or hybrid, any `input_shape`).
        layers: encoder block index (0 = first block, -1 = the last), a list of them, or None
            for every block. Block `i`'s output is transformers' `hidden_states[i + 1]`.
        norm: apply the encoder's final LayerNorm (then block -1 gives the encoder's output;
            a model with `fc_norm` has none on its tokens).
        grid: return the patch tokens as `(batch, h, w, width)` grids, without the class
            (distillation, register) tokens; else the whole `(batch, prefix + h*w, width)` sequence.
        name: name of the returned model.

    Returns a model with one output for an index, a list of outputs otherwise. It can be
    fitted (it trains `model`'s weights), saved and exported like any Keras model.
    """
    encoder = encoder_layer(model)
    indices = block_indices(layers, encoder.depth)
    if grid and is_naflex(model):
        raise ValueError("grid=True needs one patch grid per batch; a NaFlex model's images each have their own "
                         "(its `spatial_shapes`): use grid=False.")
    (tokens, rope), after = encoder_inputs(model), {}
    for i, block in enumerate(encoder.blocks[: max(indices) + 1]):
        tokens = after[i] = block(tokens, **rope)
    outputs = [after[i] for i in indices]
    if norm and encoder.encoder_norm is not None:
        outputs = [encoder.encoder_norm(x) for x in outputs]
    if grid:
        to_grid = TokenGrid(prefix_tokens(model), name="token_grid")
        outputs = [to_grid(x, embedding_layer(model).output) for x in outputs]
    return keras.Model(model.input, outputs[0] if _is_index(layers) else outputs, name=name or f"{model.name}_features")


def features(model, images, layers=None, *, norm=False, grid=False, batch_size=16):
    """The tokens after encoder blocks `layers` for `images`, as NumPy float32 arrays.

    `images` is a `(batch, height, width, 3)` batch, preprocessed as the model expects
    (`keras_vit.preprocess_input`), or for a NaFlex model the dict of `keras_vit.naflex_inputs`;
    it runs in chunks of `batch_size`. See
    `feature_extractor` for `layers`, `norm` and `grid`. Returns one array for an index,
    a list of arrays for a list (or None: every block).
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, numbers.Integral) or batch_size < 1:
        raise ValueError(f"batch_size={batch_size!r}: expected a whole number >= 1 (images run at a time).")
    if is_naflex(model):
        images = check_naflex_inputs(images)
        count, take = len(images["patches"]), lambda a, b: {k: v[a:b] for k, v in images.items()}
    else:
        images = check_images(images)
        count, take = len(images), lambda a, b: images[a:b]
    if not count:
        raise ValueError("images is an empty batch; give at least one image.")
    extractor = feature_extractor(model, layers, norm=norm, grid=grid)
    chunks = []
    for start in range(0, count, batch_size):
        out = extractor(take(start, start + batch_size), training=False)
        chunks.append([ops.convert_to_numpy(x).astype("float32") for x in (out if isinstance(out, list) else [out])])
    arrays = [np.concatenate(parts) for parts in zip(*chunks)]
    return arrays[0] if _is_index(layers) else arrays
