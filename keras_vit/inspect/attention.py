"""What the heads attend to: attention rollout (paper Fig. 6) and mean attention distance
(paper Fig. 7 right), from the attention weights of the model's own encoder layers."""

import keras
import numpy as np
from keras import ops

from keras_vit.inspect.model_parts import check_images, embedding_layer, encoder_layer, has_class_token, prefix_tokens


def attention_weights(model, images, batch_size=16):
    """Runs `model`'s encoder on `images` and yields, per batch of at most `batch_size`
    images, `(weights, grid, patch_pixels)`: the list of per-block `(batch, heads, tokens,
    tokens)` softmax weights (NumPy float32), the `(rows, columns)` token grid and the
    `(height, width)` in pixels of the image area one token covers.

    The weights are those of the very encoder layer the model runs for inference (its
    `return_attention_weights` path), on every backend, hybrid models included.
    """
    images = check_images(images)
    encoder = encoder_layer(model)
    inputs = encoder.input if isinstance(encoder.input, list) else [encoder.input]  # tokens (, rope coordinates)
    feeder = keras.Model(model.input, [embedding_layer(model).output, *inputs])
    for start in range(0, len(images), batch_size):
        batch = images[start : start + batch_size]
        grid, *inputs = feeder(batch, training=False)
        _, weights = encoder(*inputs, training=False, return_attention_weights=True)
        rows, cols = ops.shape(grid)[1], ops.shape(grid)[2]
        pixels = (batch.shape[1] / rows, batch.shape[2] / cols)
        yield [ops.convert_to_numpy(w).astype("float32") for w in weights], (rows, cols), pixels


def rollout(weights):
    """Attention rollout (Abnar & Zuidema, 2020) of per-block `(batch, heads, T, T)` weights:
    each block's head-averaged attention plus the identity for the residual connection,
    rows renormalised, multiplied from the first block to the last. Returns `(batch, T, T)`;
    row `i` is the distribution over input tokens that output token `i` draws from."""
    if not len(weights):
        raise ValueError("rollout needs the attention weights of at least one block.")
    joint = None
    for w in weights:
        w = np.asarray(w, np.float64)
        if w.ndim != 4 or w.shape[-1] != w.shape[-2]:
            raise ValueError(f"Attention weights must be (batch, heads, tokens, tokens), got {w.shape}.")
        a = w.mean(axis=1) + np.eye(w.shape[-1])
        a /= a.sum(axis=-1, keepdims=True)
        joint = a if joint is None else a @ joint
    return joint


def attention_rollout(model, images, batch_size=16):
    """Attention maps over the image by attention rollout (paper Fig. 6).

    The class token's rollout row over the patch tokens, scaled to a maximum of 1 and
    bilinearly resized to the image: `(batch, height, width)` float32 masks in [0, 1], to be
    multiplied with the image.
    """
    prefix = prefix_tokens(model)
    if not has_class_token(model):
        raise ValueError("attention_rollout follows the class token; this model has none.")
    maps = []
    for weights, (rows, cols), _ in attention_weights(model, images, batch_size):
        row = rollout(weights)[:, 0, prefix:]
        grid = row.reshape(-1, rows, cols, 1).astype("float32")
        size = np.asarray(images).shape[1:3]
        up = ops.convert_to_numpy(ops.image.resize(grid, size, interpolation="bilinear"))[..., 0]
        maps.append(up / up.max(axis=(1, 2), keepdims=True))
    return np.concatenate(maps).astype("float32")


def distance_matrix(grid, patch_pixels):
    """`(N, N)` pixel distances between the centres of the patches of a `(rows, cols)`
    grid whose cells are `patch_pixels = (height, width)` pixels, row-major order."""
    rows, cols = grid
    r, c = np.divmod(np.arange(rows * cols), cols)
    dy = (r[:, None] - r[None, :]) * patch_pixels[0]
    dx = (c[:, None] - c[None, :]) * patch_pixels[1]
    return np.sqrt(dy**2 + dx**2)


def attention_distance(weights, grid, patch_pixels, num_prefix_tokens=1):
    """Mean attention distance of per-block `(batch, heads, T, T)` weights: for every patch
    query, the attention-weighted mean pixel distance to the patch keys, averaged over
    queries and batch. Attention to prefix (class) tokens has no place in the image, so each
    query's weights over the patch keys are renormalised to sum to one (a query attending
    only to the prefix counts as distance 0). Returns `(blocks, heads)` in pixels."""
    distances = distance_matrix(grid, patch_pixels)
    n = distances.shape[0]
    out = []
    for w in weights:
        w = np.asarray(w, np.float64)
        if w.ndim != 4 or w.shape[-1] != n + num_prefix_tokens:
            raise ValueError(
                f"Attention weights of shape {w.shape} do not match a {grid[0]}x{grid[1]} grid "
                f"with {num_prefix_tokens} prefix token(s)."
            )
        patches = w[..., num_prefix_tokens:, num_prefix_tokens:]
        mass = patches.sum(-1)
        mean = (patches * distances).sum(-1) / np.where(mass > 0, mass, 1.0)
        out.append(mean.mean(axis=(0, 2)))
    return np.stack(out)


def mean_attention_distance(model, images, batch_size=16):
    """Mean attention distance (paper Fig. 7 right): `(layers, heads)` in pixels, averaged
    over `images` (the paper averages over 128 images). See `attention_distance`."""
    prefix = prefix_tokens(model)
    total, count = 0.0, 0
    for weights, grid, pixels in attention_weights(model, images, batch_size):
        batch = weights[0].shape[0]
        total = total + attention_distance(weights, grid, pixels, prefix) * batch
        count += batch
    return (total / count).astype("float32")
