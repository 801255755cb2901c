"""Builds a Vision Transformer holding a checkpoint's weights (`weights=` of the builders)."""

import dataclasses

from keras_vit.interpolation import check
from keras_vit.weights.building import build_from_checkpoint
from keras_vit.weights.reading import weights_checkpoint


@dataclasses.dataclass(frozen=True)
class PretrainedWeights:
    """`weights=` with options: `source` is a named checkpoint or a path; `interpolation` (a
    name of `keras_vit.interpolation.INTERPOLATIONS`; None: the builder's `interpolation=`,
    else the checkpoint's library's) resizes the position embeddings when the model's patch
    grid differs from the checkpoint's, at load time and at run time."""

    source: object
    interpolation: str = None

    def __post_init__(self):
        if self.interpolation is not None:
            check(self.interpolation)


def build_with_weights(config, weights, input_shape=None, input_tensor=None):
    """`VisionTransformer(..., weights=...)`: builds the model for the `ViTConfig` `config`
    and loads the checkpoint `weights` (a name, a path, a `Checkpoint` or `PretrainedWeights`)."""
    spec = weights if isinstance(weights, PretrainedWeights) else PretrainedWeights(weights)
    ckpt = weights_checkpoint(spec.source, config)
    return build_from_checkpoint(config, ckpt, spec.interpolation, input_shape, input_tensor)
