"""Optimizers and learning-rate schedules of the ViT recipes."""

import math

import keras
from keras import ops

from keras_vit.training import ema, layer_decay
from keras_vit.training.optimizer_classes import CLASSES, OWN_BETA_2
from keras_vit.training.config import LR_SCALINGS, OPTIMIZERS, SCHEDULES

# Not decayed by AdamW: biases, LayerNorm scales / offsets, the class token and position embeddings.
NO_DECAY = ("bias", "gamma", "beta", "cls", "pos_embedding")

# Muon (`keras.optimizers.Muon`) orthogonalises the updates of the 2-D hidden kernels (attention
# and MLP); its AdamW step takes the rest, as Keras and timm split them: Keras sends every variable
# that is not 2-D (patch-embedding kernel, class token, position embeddings, norms, biases) and
# every "embedding" to AdamW, and these path patterns add the 2-D output layers (the classifier
# and pre-logits heads, the masked patch prediction head).
MUON_ADAMW_LAYERS = (r"(^|/|_)head/", r"(^|/)pre_logits/")


@keras.saving.register_keras_serializable(package="keras_vit")
class WarmupSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warm-up from 0 to `peak` over `warmup_steps`, then `decay` to `end` at `total_steps`.

    `decay`: "cosine" (half cosine), "linear" or "constant" (stay at `peak`).
    """

    def __init__(self, peak, total_steps, warmup_steps=0, decay="cosine", end=0.0):
        if decay not in SCHEDULES:
            raise ValueError(f"schedule={decay!r}; expected one of {SCHEDULES}.")
        if total_steps < 1 or not 0 <= warmup_steps <= total_steps:
            raise ValueError(
                f"Need total_steps >= 1 and 0 <= warmup_steps <= total_steps, got "
                f"total_steps={total_steps}, warmup_steps={warmup_steps}."
            )
        self.peak = float(peak)
        self.total_steps = int(total_steps)
        self.warmup_steps = int(warmup_steps)
        self.decay = decay
        self.end = float(end)

    def __call__(self, step):
        step = ops.cast(step, "float32")
        warmup = self.peak * (step + 1.0) / max(self.warmup_steps, 1)
        progress = ops.clip((step - self.warmup_steps) / max(self.total_steps - self.warmup_steps, 1), 0.0, 1.0)
        if self.decay == "cosine":
            fraction = 0.5 * (1.0 + ops.cos(math.pi * progress))
        elif self.decay == "linear":
            fraction = 1.0 - progress
        else:
            fraction = ops.ones_like(progress)
        decayed = self.end + (self.peak - self.end) * fraction
        return ops.where(step < self.warmup_steps, warmup, decayed)

    def get_config(self):
        return {
            "peak": self.peak,
            "total_steps": self.total_steps,
            "warmup_steps": self.warmup_steps,
            "decay": self.decay,
            "end": self.end,
        }


@keras.saving.register_keras_serializable(package="keras_vit")
class PerUpdate(keras.optimizers.schedules.LearningRateSchedule):
    """`schedule` indexed by optimizer update while Keras counts micro-batches.

    With gradient accumulation over `k` micro-batches, Keras calls the schedule with its
    micro-batch counter; update `n` (from 0) is applied at counter `n * k + k - 1`, which
    integer division by `k` maps back to `n`.
    """

    def __init__(self, schedule, accumulation_steps):
        self.schedule = schedule
        self.accumulation_steps = int(accumulation_steps)

    def __call__(self, step):
        return self.schedule(ops.floor_divide(step, self.accumulation_steps))

    def get_config(self):
        return {
            "schedule": keras.saving.serialize_keras_object(self.schedule),
            "accumulation_steps": self.accumulation_steps,
        }

    @classmethod
    def from_config(cls, config):
        return cls(keras.saving.deserialize_keras_object(config["schedule"]), config["accumulation_steps"])


def scaled_learning_rate(learning_rate, batch_size, reference_batch_size, scaling="none"):
    """`learning_rate` (tuned at `reference_batch_size`) for a global `batch_size`."""
    if scaling not in LR_SCALINGS:
        raise ValueError(f"lr_scaling={scaling!r}; expected one of {LR_SCALINGS}.")
    ratio = batch_size / reference_batch_size
    return learning_rate * {"none": 1.0, "linear": ratio, "sqrt": math.sqrt(ratio)}[scaling]


def build_optimizer(
    name,
    learning_rate,
    *,
    momentum=0.9,
    beta_1=0.9,
    beta_2=None,
    weight_decay=0.0,
    clipnorm=None,
    accumulation_steps=1,
    lr_scales=None,
    ema_decay=0.0,
):
    """A Keras optimizer; `clipnorm` clips the global norm; accumulation averages micro-batches
    (a learning-rate schedule still counts optimizer updates).

    `lr_scales` (`{variable path: scale}`, e.g. `layer_decay.layer_scales`) multiplies
    those variables' learning rates (see `keras_vit.training.layer_decay`); `ema_decay` > 0
    keeps an exponential average of the trained weights (see `keras_vit.training.ema`).
    "muon": Keras' Muon with `momentum` (Nesterov) for the hidden kernels and its AdamW step
    (`beta_1`, `beta_2`) for the rest (`MUON_ADAMW_LAYERS`), one `weight_decay` for both.
    "lamb" (You et al., 2020; DeiT III's), "lion" (Chen et al., 2023) and "adafactor" (Shazeer and
    Stern, 2018; its relative step and decay schedule, no `beta_*`) are Keras' own; `beta_2=None`
    takes each optimizer's own value (`OWN_BETA_2`)."""
    if name not in OPTIMIZERS:
        raise ValueError(f"optimizer={name!r}; expected one of {OPTIMIZERS}.")
    if accumulation_steps < 1:
        raise ValueError(f"accumulation_steps={accumulation_steps} must be >= 1.")
    if accumulation_steps > 1 and isinstance(learning_rate, keras.optimizers.schedules.LearningRateSchedule):
        learning_rate = PerUpdate(learning_rate, accumulation_steps)
    common = dict(
        learning_rate=learning_rate,
        global_clipnorm=clipnorm or None,
        gradient_accumulation_steps=accumulation_steps if accumulation_steps > 1 else None,
    )
    if weight_decay or name in ("adamw", "muon"):  # their own default decay is not 0: always pass ours
        common["weight_decay"] = weight_decay
    classes = CLASSES
    if lr_scales:
        classes = layer_decay.OPTIMIZERS
        common["lr_scales"] = lr_scales
    cls = classes[name]
    if ema_decay:
        cls = ema.AVERAGING[cls]
        common.update(use_ema=True, ema_momentum=ema_decay)
    beta_2 = OWN_BETA_2.get(name) if beta_2 is None else beta_2
    if name == "sgd":
        optimizer = cls(momentum=momentum, **common)
    elif name == "muon":
        optimizer = cls(momentum=momentum, adam_beta_1=beta_1, adam_beta_2=beta_2, adam_weight_decay=weight_decay,
                        exclude_layers=list(MUON_ADAMW_LAYERS), **common)
    elif name == "adafactor":
        optimizer = cls(**common)
    else:
        optimizer = cls(beta_1=beta_1, beta_2=beta_2, **common)
    if weight_decay:
        optimizer.exclude_from_weight_decay(var_names=list(NO_DECAY))
    return optimizer
