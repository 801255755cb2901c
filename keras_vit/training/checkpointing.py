"""Fault tolerance: the run state saved atomically, restored by the same command, best model kept.

A run directory holds:

    checkpoint/state.json            {"step", "weights", "best", "best_epoch", "fingerprint"}
    checkpoint/step-<N>.weights.h5   model + optimizer variables after N training steps
    best.keras                       the model (softmax output) of the best epoch so far

Each save writes a new weights file, then replaces `state.json` (an atomic rename) to point
at it, then deletes the previous file: a crash at any moment leaves a consistent state.
"Step" counts `model.fit` steps (micro-batches when accumulating gradients); the epoch and the
position in the input stream follow from it.
"""

import json
import math
import os

import keras
import numpy as np

from keras_vit.files import atomic_path

STATE = "state.json"


class TrainingDiverged(FloatingPointError):
    """The training loss became NaN or infinite."""


def write_json(path, payload):
    """Writes `payload` as JSON to `path` atomically (temporary file + rename)."""
    with atomic_path(path) as tmp, open(tmp, "w") as handle:
        json.dump(payload, handle, indent=1)
        handle.flush()
        os.fsync(handle.fileno())


def save_model_atomic(model, path):
    """`model.save(path)` through a temporary `.keras` file and a rename."""
    with atomic_path(path) as tmp:
        model.save(tmp)


def read_state(directory):
    """The saved run state in `directory` (a dict), or None if there is none."""
    path = os.path.join(directory, STATE)
    if not os.path.exists(path):
        return None
    with open(path) as handle:
        return json.load(handle)


class StopOnNaN(keras.callbacks.Callback):
    """Stops training with `TrainingDiverged` as soon as the loss is not finite."""

    def __init__(self, hint=""):
        super().__init__()
        self.hint = hint
        self.epoch = 0

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        loss = (logs or {}).get("loss")
        if loss is not None and not math.isfinite(float(np.asarray(loss))):
            raise TrainingDiverged(
                f"The training loss became {float(np.asarray(loss))} at epoch {self.epoch + 1}, "
                f"batch {batch + 1}; training stopped. {self.hint}"
            )


class RunState(keras.callbacks.Callback):
    """Saves model + optimizer + step every `every_steps` steps (0: only at epoch ends) and the
    best `inference_model` by `monitor`; `restore` loads the latest state into a model.

    `write=False` (processes other than the chief) keeps count but writes nothing.
    """

    def __init__(self, run_dir, inference_model, *, every_steps=0, monitor="val_accuracy", fingerprint=None, write=True):
        super().__init__()
        self.run_dir = run_dir
        self.directory = os.path.join(run_dir, "checkpoint")
        self.inference_model = inference_model
        self.every_steps = int(every_steps)
        self.monitor = monitor
        self.mode = "min" if "loss" in monitor else "max"
        self.fingerprint = fingerprint or {}
        self.write = write
        self.step = 0
        self.best = None
        self.best_epoch = None
        self._last_loss = None

    @property
    def best_path(self):
        return os.path.join(self.run_dir, "best.keras")

    def restore(self, model):
        """Loads the saved state into `model` (compiled); returns the step it continues from."""
        state = read_state(self.directory)
        if state is None:
            return 0
        saved = state.get("fingerprint", {})
        changed = {k: (saved[k], v) for k, v in self.fingerprint.items() if k in saved and saved[k] != v}
        if changed:
            details = ", ".join(f"{k}: {old!r} -> {new!r}" for k, (old, new) in changed.items())
            raise ValueError(
                f"{self.run_dir} holds a run with different settings ({details}); resume it with "
                "the same settings, or start a new run with another output_dir (or resume=False)."
            )
        if not model.optimizer.built:
            model.optimizer.build(model.trainable_variables)
        model.load_weights(os.path.join(self.directory, state["weights"]))
        self.step = int(state["step"])
        self.best, self.best_epoch = state.get("best"), state.get("best_epoch")
        return self.step

    def _improved(self, value):
        if value is None or not math.isfinite(value):
            return False
        if self.best is None:
            return True
        return value > self.best if self.mode == "max" else value < self.best

    def save(self):
        if not self.write:
            return
        os.makedirs(self.directory, exist_ok=True)
        previous = read_state(self.directory)
        name = f"step-{self.step}.weights.h5"
        if previous is not None and previous["weights"] == name:
            return
        with atomic_path(os.path.join(self.directory, name)) as tmp:
            self.model.save_weights(tmp)
        state = {
            "step": self.step,
            "weights": name,
            "best": self.best,
            "best_epoch": self.best_epoch,
            "fingerprint": self.fingerprint,
        }
        write_json(os.path.join(self.directory, STATE), state)
        if previous is not None:
            old = os.path.join(self.directory, previous["weights"])
            if os.path.exists(old):
                os.remove(old)

    def on_train_batch_end(self, batch, logs=None):
        self.step += 1
        loss = (logs or {}).get("loss")
        self._last_loss = None if loss is None else float(np.asarray(loss))
        if self.every_steps and self.step % self.every_steps == 0 and self._finite():
            self.save()

    def _finite(self):
        return self._last_loss is None or math.isfinite(self._last_loss)

    def on_epoch_end(self, epoch, logs=None):
        value = (logs or {}).get(self.monitor)
        value = None if value is None else float(np.asarray(value))
        if self._improved(value):
            self.best, self.best_epoch = value, epoch + 1
            if self.write:
                save_model_atomic(self.inference_model, self.best_path)
        if self._finite():
            self.save()
