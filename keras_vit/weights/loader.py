"""Builds a Vision Transformer holding a checkpoint's weights (`weights=` of the builders)."""

import dataclasses

from keras_vit.config.interpolation import check
from keras_vit.weights.building import build_from_checkpoint
from keras_vit.weights.reading import weights_checkpoint


@dataclasses.dataclass(frozen=True)
class PretrainedWeights:
    """`weights=` with options: `source` is a named checkpoint or a path; `interpolation` (a
    name of `keras_vit.config.interpolation.INTERPOLATIONS`; None: the builder's `interpolation=`,
    else the checkpoint's library's) resizes the position embeddings when the model's patch
    grid differs from the checkpoint's, at load time and at run time; `force_download`: fetch
    a named checkpoint's file again (e.g. after it was refused as changed since its download)."""

    source: object
    interpolation: str = None
    force_download: bool = False

    def __post_init__(self):
        if self.interpolation is not None:
            check(self.interpolation)


def build_with_weights(config, weights, input_shape=None, input_tensor=None):
    """`VisionTransformer(..., weights=...)`: builds the model for the `ViTConfig` `config`
    and loads the checkpoint `weights` (a name, a path, a `Checkpoint` or `PretrainedWeights`)."""
    spec = weights if isinstance(weights, PretrainedWeights) else PretrainedWeights(weights)
    ckpt = weights_checkpoint(spec.source, config, force_download=spec.force_download)
    return build_from_checkpoint(config, ckpt, spec.interpolation, input_shape, input_tensor)
