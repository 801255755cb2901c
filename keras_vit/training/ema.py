"""Weight EMA (Polyak averaging): Keras' optimizer EMA (`use_ema`, `ema_momentum`), once per
update and never written into the trained weights by `fit`.

After each optimizer update `n` the optimizer keeps, for every variable it trains,

    average_0 = weights_0,    average_n = decay * average_(n-1) + (1 - decay) * weights_n

The averages are optimizer variables, so a run's step checkpoints hold them next to the
trained weights and a resumed run continues the same average. Keras' own EMA differs in two
ways that this module changes: it moves the average after every micro-batch of gradient
accumulation (k times per update, the weights unchanged k - 1 of them), and `fit` overwrites
the weights with the average when it returns (a resumed or continued run would go on from the
average). Here the run swaps the average in only where it is used (`averaged`): validation,
`best.keras`, the few-shot evaluation, and the saved model at the end (`use_average`).
"""

import contextlib

import keras
from keras import ops

from keras_vit.training.optimizer_classes import CLASSES
from keras_vit.training.layer_decay import OPTIMIZERS as LAYER_DECAY_OPTIMIZERS, instantiated_class


class PerUpdateAverage:
    """Mixin for a Keras optimizer class with `use_ema=True`: the average moves once per
    optimizer update (not per accumulated micro-batch), and `fit` leaves the weights alone."""

    def _update_model_variables_moving_average(self, trainable_variables):
        steps = self.gradient_accumulation_steps or 1
        updated = ops.equal(ops.mod(self._iterations + 1, steps), 0)  # this call applied an update
        decay = ops.where(ops.equal(self.iterations, 0), 0.0, self.ema_momentum)  # the first update: a copy
        for variable, average in zip(trainable_variables, self._model_variables_moving_average):
            if average is None:
                continue
            previous = ops.convert_to_tensor(average)
            rate = ops.cast(decay, average.dtype)
            moved = rate * previous + (1 - rate) * ops.cast(variable, average.dtype)
            average.assign(ops.where(updated, moved, previous))

    def finalize_variable_values(self, var_list):
        """Nothing: `fit` calls this when it returns; the run decides where the average goes."""


def _averaging_class(cls):
    name = f"EMA{cls.__name__}"
    doc = f"`{cls.__name__}` with a weight EMA moved once per update, kept out of the weights (`training.ema`)."
    new = type(name, (PerUpdateAverage, instantiated_class(cls)), {"__doc__": doc, "__module__": __name__})
    return keras.saving.register_keras_serializable(package="keras_vit")(new)


# Optimizer class -> its averaging class (registered, so a saved compiled model loads).
AVERAGING = {
    cls: _averaging_class(cls)
    for cls in (*CLASSES.values(), *LAYER_DECAY_OPTIMIZERS.values())
}


def _averaging_optimizer(model):
    """The optimizer of `model` that keeps a weight EMA (inside a loss-scale wrapper), or None."""
    optimizer = getattr(model, "optimizer", None)
    optimizer = getattr(optimizer, "inner_optimizer", optimizer)
    return optimizer if getattr(optimizer, "use_ema", False) and optimizer.built else None


def _pairs(model):
    """`(trained variable, its average)` pairs of `model`. (Under JAX inside `fit`, a callback's
    `self.model` has the latest state in its variables: Keras syncs it on access.)"""
    optimizer = _averaging_optimizer(model)
    return [] if optimizer is None else list(zip(optimizer._trainable_variables,
                                                 optimizer._model_variables_moving_average))


def _swap(pairs):
    for variable, average in pairs:
        weights = ops.copy(variable.value)
        variable.assign(average.value)
        average.assign(weights)


@contextlib.contextmanager
def averaged(model):
    """Inside the block the trained variables of `model` (compiled) hold their average, if its
    optimizer keeps one; on exit they hold the trained weights again."""
    pairs = _pairs(model)
    _swap(pairs)
    try:
        yield
    finally:
        _swap(pairs)


def use_average(model):
    """Writes the average into the trained variables of `model` (the end of a run), if its
    optimizer keeps one; the average itself is unchanged."""
    for variable, average in _pairs(model):
        variable.assign(average.value)


class EvaluateAverage(keras.callbacks.Callback):
    """Evaluation inside `fit` (the validation metrics) on the averaged weights."""

    def __init__(self):
        super().__init__()
        self._inside = None

    def on_test_begin(self, logs=None):
        self._inside = averaged(self.model)
        self._inside.__enter__()

    def on_test_end(self, logs=None):
        if self._inside is not None:
            self._inside.__exit__(None, None, None)
            self._inside = None
