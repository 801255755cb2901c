"""What the embeddings learned (paper Fig. 7 left and centre)."""

import numpy as np
from keras import ops

from keras_vit.inspect.model_parts import embedding_layer, position_layer


def position_embedding_similarity(model):
    """Cosine similarity of every patch's position embedding with every other's:
    `(rows, cols, rows, cols)`; `[i, j]` is the map of patch `(i, j)` against the grid.
    The class token's embedding is left out. A model with rotary position embeddings alone
    (no table: DINOv3, RoPE-ViT) is refused (ValueError)."""
    layer = position_layer(model)
    if not hasattr(layer, "embeddings"):
        raise ValueError(f"{model.name} has no position table (its positions are rotary embeddings of the queries "
                         "and keys): no position-embedding similarity to show.")
    table = ops.convert_to_numpy(layer.embeddings).astype(np.float64)[0, layer.num_prefix_tokens :]
    rows, cols = layer.grid_size
    unit = table / np.maximum(np.linalg.norm(table, axis=-1, keepdims=True), 1e-12)
    return (unit @ unit.T).reshape(rows, cols, rows, cols).astype("float32")


def patch_embedding_components(model, k=28):
    """The top `k` principal components of the patch-embedding filters, as RGB patches.

    Each of the `D` columns of the embedding `E` (paper eq. 1) is a `(P, P, 3)` filter; the
    components of those `D` filters (centred) are returned as `(k, P, P, 3)` float32 with
    unit norm, largest variance first; each is signed so its largest entry is positive.
    """
    layer = embedding_layer(model)
    kernel = ops.convert_to_numpy(layer.kernel).astype(np.float64)
    p, q, channels, dim = kernel.shape
    image_channels = model.inputs[0].shape[-1]
    if channels != 3 or image_channels != 3:
        raise ValueError(
            f"The patch embedding of model {model.name!r} reads {channels} channels, not RGB pixels "
            "(a hybrid model embeds CNN features, whose filters are not images); "
            "patch_embedding_components needs a ViT on RGB images."
        )
    most = min(dim, p * q * channels)
    if not isinstance(k, int) or not 1 <= k <= most:
        raise ValueError(f"k={k!r} must be an integer from 1 to {most} (the filters' rank bound).")
    filters = kernel.reshape(p * q * channels, dim).T
    _, _, components = np.linalg.svd(filters - filters.mean(axis=0), full_matrices=False)
    components = components[:k]
    peaks = components[np.arange(k), np.abs(components).argmax(axis=1)]
    components *= np.sign(peaks)[:, None]
    return components.reshape(k, p, q, channels).astype("float32")
