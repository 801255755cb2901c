"""Inspecting a Vision Transformer (paper section 4.5, Fig. 6 and 7).

Numbers: `attention_rollout`, `mean_attention_distance`, `position_embedding_similarity`,
`patch_embedding_components` (and the lower-level `attention_weights`, `rollout`,
`attention_distance`); the tokens after chosen blocks: `features`, `feature_extractor`.
Pictures: the `plot_*` functions return matplotlib figures; `save_figure` writes one as a PNG. `keras-vit inspect` does it all for an image.
"""

from keras_vit.inspect.attention import (
    attention_distance,
    attention_rollout,
    attention_weights,
    mean_attention_distance,
    rollout,
)
from keras_vit.inspect.embeddings import patch_embedding_components, position_embedding_similarity
from keras_vit.inspect.features import feature_extractor, features
from keras_vit.inspect.plots import (
    plot_attention_rollout,
    plot_mean_attention_distance,
    plot_patch_embedding_components,
    plot_position_embedding_similarity,
    save_figure,
)

__all__ = [
    "attention_distance",
    "attention_rollout",
    "attention_weights",
    "feature_extractor",
    "features",
    "mean_attention_distance",
    "patch_embedding_components",
    "plot_attention_rollout",
    "plot_mean_attention_distance",
    "plot_patch_embedding_components",
    "plot_position_embedding_similarity",
    "position_embedding_similarity",
    "rollout",
    "save_figure",
]
