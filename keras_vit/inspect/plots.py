"""Matplotlib panels after the paper's Fig. 6 and Fig. 7, drawn without pyplot (Agg canvas),
so they work headless and leave the user's matplotlib backend alone."""

import os

import numpy as np

from keras_vit.utils.files import atomic_path


def _figure(width, height):
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise ImportError(
            "keras_vit.inspect plots need matplotlib: pip install 'keras-vit[inspect]'."
        ) from None
    figure = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(figure)
    return figure


def _unit_range(array):
    """Min-max scales an array to [0, 1] (constant arrays become 0.5)."""
    array = np.asarray(array, np.float64)
    low, high = array.min(), array.max()
    return np.full_like(array, 0.5) if high == low else (array - low) / (high - low)


def plot_patch_embedding_components(components, columns=7, title=None):
    """Fig. 7 (left): the principal components of the patch-embedding filters as RGB
    patches, each min-max scaled for display. `components`: `(k, P, P, 3)`."""
    components = np.asarray(components)
    if components.ndim != 4 or components.shape[-1] != 3:
        raise ValueError(f"components must be (k, P, P, 3), got shape {components.shape}.")
    k = len(components)
    rows = -(-k // columns)
    figure = _figure(1.0 * columns, 1.0 * rows + 0.5)
    figure.suptitle(title or f"RGB embedding filters\n(first {k} principal components, each scaled to its own range)",
                    fontsize=10)
    for i in range(rows * columns):
        ax = figure.add_subplot(rows, columns, i + 1)
        ax.set_axis_off()
        if i < k:
            ax.imshow(_unit_range(components[i]), interpolation="nearest")
    return figure


def plot_position_embedding_similarity(similarity, title="Position embedding similarity"):
    """Fig. 7 (centre): for every patch (tile at its row and column), the cosine similarity
    of its position embedding with those of all patches. `similarity`: `(rows, cols, rows,
    cols)`."""
    similarity = np.asarray(similarity, np.float64)
    if similarity.ndim != 4 or similarity.shape[:2] != similarity.shape[2:]:
        raise ValueError(f"similarity must be (rows, cols, rows, cols), got shape {similarity.shape}.")
    rows, cols = similarity.shape[:2]
    cell = np.full((rows, cols, rows + 1, cols + 1), np.nan)
    cell[:, :, :rows, :cols] = similarity
    mosaic = cell.transpose(0, 2, 1, 3).reshape(rows * (rows + 1), cols * (cols + 1))[:-1, :-1]
    side = max(5.0, 0.5 * max(rows, cols))
    figure = _figure(side + 1.5, side)
    ax = figure.add_subplot(1, 1, 1)
    image = ax.imshow(mosaic, cmap="viridis", vmin=-1, vmax=1, interpolation="nearest")
    ax.set_xticks(np.arange(cols) * (cols + 1) + (cols - 1) / 2, [str(c + 1) for c in range(cols)])
    ax.set_yticks(np.arange(rows) * (rows + 1) + (rows - 1) / 2, [str(r + 1) for r in range(rows)])
    ax.tick_params(length=0, labelsize=7)
    ax.set_xlabel("Input patch column")
    ax.set_ylabel("Input patch row")
    ax.set_title(title)
    figure.colorbar(image, ax=ax, label="Cosine similarity", fraction=0.046, pad=0.04)
    return figure


def plot_mean_attention_distance(distances, image_size=None, title=None):
    """Fig. 7 (right): one dot per head, mean attention distance (pixels) against depth.
    `distances`: `(layers, heads)`; `image_size` (pixels) sets the y range if given."""
    distances = np.asarray(distances, np.float64)
    if distances.ndim != 2:
        raise ValueError(f"distances must be (layers, heads), got shape {distances.shape}.")
    layers, heads = distances.shape
    figure = _figure(4.5, 4.0)
    ax = figure.add_subplot(1, 1, 1)
    depth = np.repeat(np.arange(1, layers + 1), heads).reshape(layers, heads)
    for h in range(heads):
        ax.scatter(depth[:, h], distances[:, h], s=14, label=f"Head {h + 1}")
    ax.set_xlabel("Network depth (layer)")
    ax.set_ylabel("Mean attention distance (pixels)")
    ax.set_xticks(np.arange(1, layers + 1))
    top = image_size if image_size else max(distances.max(), 1.0) * 1.05
    ax.set_ylim(0, top)
    ax.set_title(title or f"Mean attention distance ({heads} heads)")
    if heads <= 16:
        ax.legend(fontsize=6, ncol=2, loc="lower right")
    return figure


def plot_attention_rollout(images, maps, title="Attention rollout"):
    """Fig. 6: each input image, the image weighted by its attention map (the paper's panel), and
    the map itself as a heat map over the image with a colour bar of its range (a nearly flat
    map, common in small models, looks like the input in the paper's panel; here it shows).
    `images`: `(batch, H, W, 3)` in any range (min-max scaled for display); `maps`: `(batch, H,
    W)` in [0, 1], e.g. from `attention_rollout`."""
    images, maps = np.asarray(images, np.float64), np.asarray(maps, np.float64)
    if images.ndim != 4 or maps.shape != images.shape[:3]:
        raise ValueError(
            f"images (batch, H, W, 3) and maps (batch, H, W) must match, got {images.shape} and {maps.shape}."
        )
    n = len(images)
    figure = _figure(8.2, 2.6 * n)
    figure.suptitle(title)
    for i in range(n):
        shown = _unit_range(images[i])
        low, high = maps[i].min(), maps[i].max()
        panels = ((shown, "Input"), (shown * maps[i][..., None], "Input x attention"),
                  (None, f"Attention {low:.2f}-{high:.2f}"))
        for j, (picture, label) in enumerate(panels):
            ax = figure.add_subplot(n, 3, 3 * i + j + 1)
            ax.set_axis_off()
            ax.set_title(label, fontsize=9)
            if picture is not None:
                ax.imshow(picture, interpolation="bilinear")
                continue
            ax.imshow(shown.mean(axis=-1), cmap="gray", interpolation="bilinear")
            heat = ax.imshow(maps[i], cmap="inferno", alpha=0.6, interpolation="bilinear",
                             vmin=low, vmax=high if high > low else low + 1e-6)
            figure.colorbar(heat, ax=ax, fraction=0.046, pad=0.04, label="attention weight")
    return figure


def save_figure(figure, path):
    """Writes `figure` as a PNG at `path` atomically (a temporary file, then a rename)."""
    path = os.fspath(path)
    with atomic_path(path) as tmp:
        figure.savefig(tmp, format="png", bbox_inches="tight")
    return path
