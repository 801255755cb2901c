"""The patch grid of a position-embedding table (plain Python: the weights converters use it
without Keras)."""

import math


def grid_size_of(num_patches, grid_hint=None):
    """The `(h, w)` patch grid for `num_patches` tokens: `grid_hint` if it fits, else square."""
    if grid_hint is not None and grid_hint[0] * grid_hint[1] == num_patches:
        return tuple(grid_hint)
    side = math.isqrt(num_patches)
    if side * side != num_patches:
        raise ValueError(
            f"Cannot map {num_patches} position embeddings onto a 2-D patch grid: not a square "
            "number and no grid size given."
        )
    return side, side
