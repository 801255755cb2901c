"""Layer-wise learning-rate decay (BEiT, MAE, DeiT III fine-tuning).

Encoder block `i` of `depth` learns at `decay ** (depth - i)` times the learning rate; the
embeddings (stem, patch embedding, class token, position embeddings) at
`decay ** (depth + 1)`; the final norm, the head and everything else at 1. This is BEiT's and
timm's convention (layer id 0 for the embeddings, `i + 1` for block `i`, `depth + 1` for the
rest; scale `decay ** (depth + 1 - id)`).

The scale multiplies the learning rate itself, per variable, inside the optimizer's update
(variables are grouped by scale and each group is updated with `scale * learning_rate`), and
the decoupled weight decay, which Keras (like PyTorch) multiplies by the learning rate. So it
is exact for SGD (with or without momentum), Adam and AdamW; scaling the gradients instead
would be exact for plain SGD only, as Adam's step does not depend on the gradient's scale.
It runs after gradient accumulation and clipping, and uses the schedule's learning rate of
the step, so it composes with both.
"""

import keras

from keras_vit.inspect.model_parts import encoder_layer
from keras_vit.training.config import check_decay
from keras_vit.training.optimizer_classes import CLASSES, WITHOUT_LAYER_DECAY


def layer_scales(model, decay):
    """`{variable path: learning-rate scale}` of a keras_vit ViT's variables for `decay`
    (variables not listed, such as the final norm and the head, keep scale 1)."""
    decay = check_decay(decay)
    encoder = encoder_layer(model)
    depth = encoder.depth
    embeddings = keras.Model(model.input, encoder.input)  # everything that feeds the encoder
    scales = {v.path: decay ** (depth + 1) for v in embeddings.trainable_variables}
    for i, block in enumerate(encoder.blocks):
        scales.update({v.path: decay ** (depth - i) for v in block.trainable_variables})
    return scales


class ScaledLearningRates:
    """Mixin for a Keras optimizer class: `lr_scales` (`{variable path: scale}`, 1 where
    absent) multiplies each variable's learning rate and decoupled weight decay."""

    def __init__(self, *args, lr_scales=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.lr_scales = {str(path): float(scale) for path, scale in (lr_scales or {}).items()}

    def _groups(self, variables):
        """`[(scale, [positions in variables])]`, one entry per distinct scale."""
        groups = {}
        for i, variable in enumerate(variables):
            groups.setdefault(self.lr_scales.get(variable.path, 1.0), []).append(i)
        return groups.items()

    def _backend_update_step(self, grads, trainable_variables, learning_rate):
        for scale, where in self._groups(trainable_variables):
            super()._backend_update_step(
                [grads[i] for i in where],
                [trainable_variables[i] for i in where],
                learning_rate if scale == 1 else learning_rate * scale,
            )

    def _apply_weight_decay(self, variables):
        if self.weight_decay is None:
            return
        weight_decay = self.weight_decay
        try:  # the backend's own decay, run once per group with that group's decay rate
            for scale, where in self._groups(variables):
                group = [variables[i] for i in where if self._use_weight_decay(variables[i])]
                if group:
                    self.weight_decay = weight_decay * scale
                    super()._apply_weight_decay(group)
        finally:
            self.weight_decay = weight_decay

    def get_config(self):
        return {**super().get_config(), "lr_scales": self.lr_scales}


def instantiated_class(cls):
    """The class Keras instantiates for optimizer `cls` on this backend: PyTorch's substitutes
    its fused (`torch._foreach`) version, which the layer-decay class then extends."""
    return type(cls.__new__(cls))


def _layer_decay_class(cls):
    name = f"LayerDecay{cls.__name__}"
    doc = f"`keras.optimizers.{cls.__name__}` with per-variable learning-rate scales (`lr_scales`)."
    new = type(name, (ScaledLearningRates, instantiated_class(cls)), {"__doc__": doc, "__module__": __name__})
    return keras.saving.register_keras_serializable(package="keras_vit")(new)


# `optimizer=` name -> its layer-decay class (registered as `LayerDecay<Class>`, so a saved compiled model loads).
OPTIMIZERS = {name: _layer_decay_class(cls) for name, cls in CLASSES.items() if name not in WITHOUT_LAYER_DECAY}
