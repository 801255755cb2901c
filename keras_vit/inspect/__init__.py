"""Inspecting a Vision Transformer (paper section 4.5, Fig. 6 and 7).

Numbers: `attention_rollout`, `mean_attention_distance`, `position_embedding_similarity`,
`patch_embedding_components` (and the lower-level `attention_weights`, `rollout`,
`attention_distance`); the tokens after chosen blocks: `features`, `feature_extractor`. Pictures: the `plot_*` functions return matplotlib figures;
`save_figure` writes one as a PNG. `keras-vit inspect` does it all for an image. Names are
imported on first use.
"""

from keras_vit.utils.lazy_imports import lazy_package

lazy_package(
    __name__,
    {
        **dict.fromkeys(
            ["attention_distance", "attention_rollout", "attention_weights", "mean_attention_distance", "rollout"],
            "keras_vit.inspect.attention",
        ),
        **dict.fromkeys(["feature_extractor", "features"], "keras_vit.inspect.features"),
        **dict.fromkeys(
            ["patch_embedding_components", "position_embedding_similarity"], "keras_vit.inspect.embeddings"
        ),
        **dict.fromkeys(
            [
                "plot_attention_rollout",
                "plot_mean_attention_distance",
                "plot_patch_embedding_components",
                "plot_position_embedding_similarity",
                "save_figure",
            ],
            "keras_vit.inspect.plots",
        ),
    },
)
