"""Fault tolerance: the run state saved atomically, restored by the same command, best model kept.

A run directory holds:

    checkpoint/state.json            {"step", "weights", "best", "best_epoch", "fingerprint"}
    checkpoint/step-<N>.weights.h5   model + optimizer variables after N training steps
    best.keras                       the model (softmax output) of the best epoch so far (its
                                     weight average if the optimizer keeps one: `training.ema`)

Each save writes a new weights file; it becomes the state to resume from (`state.json`
replaced by an atomic rename to point at it, the previous file deleted) only once a finite
loss was computed from its weights: the validation loss of the epoch end it was saved at, or
the next training batch's loss. A crash at any moment leaves a consistent, finite state; a
NaN never makes a diverged state the one to resume from. Leftovers of a killed save are
removed when the next run starts (`RunState.tidy`), and only once the state to keep is proven
whole (`proven_state`: its weights file present and a complete HDF5 file). A write that does not
fit on the disk is refused before it starts, or fails as one `OSError` line (errno ENOSPC: the
command line's exit 75), the state to resume from intact.
"Step" counts `model.fit` steps (micro-batches when accumulating gradients); the epoch and the
position in the input stream follow from it.
"""

import contextlib
import math
import os
import re
import tempfile

import keras
import numpy as np

from keras_vit import run_folder
from keras_vit.utils.files import (atomic_path, check_space, one_line_errors, parse_json, regular_file, remove_stale,
                             write_json)
from keras_vit.training import ema

STATE = run_folder.STATE
WEIGHTS_NAME = re.compile(r"step-(\d+)\.weights\.h5")


class TrainingDiverged(FloatingPointError):
    """The training loss became NaN or infinite."""


@contextlib.contextmanager
def save_target(path, write=True, collective=False):
    """Where this process saves `path`: a temporary name renamed to `path` when it writes; a
    throw-away file when it does not but saving is collective (every process must take part,
    as under TensorFlow's multi-worker strategy); else None (no save)."""
    if write:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with atomic_path(path) as tmp:
            yield tmp
    elif collective:
        with tempfile.TemporaryDirectory(prefix="keras_vit-discard-") as folder:
            yield os.path.join(folder, os.path.basename(path))
    else:
        yield None


class BadRunState(ValueError):
    """`state.json` is not one this project wrote."""


def read_state(directory):
    """The saved run state in `directory` (a dict), or None if there is none.

    Its `weights` must be a plain `step-N.weights.h5` name (a file in `directory`, never a
    path out of it) and `step` a count >= 0, else `BadRunState`.
    """
    path = os.path.join(directory, STATE)
    if not os.path.lexists(path):
        return None
    try:
        with open(regular_file(path, "as the run state"), "rb") as handle:
            state = parse_json(handle.read())
    except ValueError as error:  # also the refusal of a FIFO, device or folder
        if not os.path.isfile(path):
            raise BadRunState(f"{error} Move it away to start the run anew.") from None
        raise BadRunState(f"{path} is not valid JSON ({error}); move it away to start the run anew.") from None
    if not isinstance(state, dict):
        raise BadRunState(f"{path} holds {type(state).__name__}, not the run state's object; move it away to start "
                          "the run anew.")
    weights = state.get("weights")
    if not (isinstance(weights, str) and WEIGHTS_NAME.fullmatch(weights)):
        raise BadRunState(
            f"{path} names weights {weights!r}; only a plain 'step-N.weights.h5' file in that folder is accepted "
            "(it was not loaded and nothing was deleted)."
        )
    for field, (ok, expected) in STATE_FIELDS.items():
        value = state.get(field, None if field in OPTIONAL else MISSING)
        if not ok(value):
            shown = "no value" if value is MISSING else repr(value)[:80]
            raise BadRunState(f"{path} has {field} {shown}; expected {expected} (nothing was loaded or deleted: "
                              "start over with --fresh, or another --output-dir).")
    return state


MISSING = object()
OPTIONAL = ("best", "best_epoch")  # none yet


def _count(low):
    return lambda value: isinstance(value, int) and not isinstance(value, bool) and value >= low


# The fields of `state.json` besides `weights`: (check, what is expected).
STATE_FIELDS = {
    "step": (_count(0), "a whole number >= 0"),
    "best": (lambda v: v is None or (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)),
             "a finite number or null"),
    "best_epoch": (lambda v: v is None or _count(1)(v), "a whole number >= 1 or null"),
    "fingerprint": (lambda v: isinstance(v, dict), "an object of the run's settings"),
}


def proven_state(directory):
    """`read_state(directory)`, its weights file checked to be there and a complete HDF5 file
    (h5py opens it and finds variables), else `BadRunState` naming what is wrong and what else
    the folder holds; nothing is deleted."""
    state = read_state(directory)
    if state is None:
        return None
    weights = os.path.join(directory, state["weights"])
    try:
        import h5py

        with h5py.File(regular_file(weights, "as the run's saved weights"), "r") as handle:
            if not len(handle.keys()):
                raise OSError("no variables in it")
    except (OSError, ValueError) as error:
        others = sorted(n for n in os.listdir(directory) if WEIGHTS_NAME.fullmatch(n) and n != state["weights"])
        what = "missing" if not os.path.lexists(weights) else f"not a complete weights file ({str(error).splitlines()[0][:120]})"
        held = f"; the folder also holds {', '.join(others)}" if others else ""
        raise BadRunState(
            f"{os.path.join(directory, STATE)} names {state['weights']}, which is {what}{held}. Nothing was deleted: "
            "point state.json at a complete weights file, or start over (--fresh, or another --output-dir)."
        ) from None
    return state


def check_room(model, path):
    """Refuses (one OSError line, ENOSPC) a save of `model`'s variables at `path` that cannot fit."""
    variables = [*model.weights, *(model.optimizer.variables if getattr(model, "optimizer", None) else [])]
    check_space(path, sum(int(np.prod(v.shape)) * np.dtype(v.dtype).itemsize for v in variables))


class StopOnNaN(keras.callbacks.Callback):
    """Stops training with `TrainingDiverged` as soon as the loss is not finite; the message
    names the last good state of `state` (a `RunState`) and gives `advice`."""

    def __init__(self, state, advice=""):
        super().__init__()
        self.state = state
        self.advice = advice
        self.epoch = 0

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        loss = _number((logs or {}).get("loss"))
        if _finite(loss):
            return
        self.state.discard_pending()
        if self.state.good_path is None:
            where = f"No good state had been saved yet: {self.advice}, then train again (it starts over)."
        else:
            where = (f"The last good state (step {self.state.good_step}) is {self.state.good_path}: "
                     f"{self.advice}, then train again with the same run directory to resume from it.")
        raise TrainingDiverged(
            f"The training loss became {loss} at epoch {self.epoch + 1}, batch {batch + 1}; training stopped. {where}"
        )


def _number(value):
    return None if value is None else float(np.asarray(value))


def _finite(value):
    return value is None or math.isfinite(value)


class SettingsChanged(ValueError):
    """The run directory holds a run with other settings; `restart` says how to start anew."""

    def __init__(self, run_dir, changes, restart="start a new run with another output_dir (or resume=False)"):
        self.run_dir, self.changes = run_dir, changes
        details = ", ".join(f"{k}: {old!r} -> {new!r}" for k, (old, new) in changes.items())
        super().__init__(
            f"{run_dir} holds a run with different settings ({details}); resume it with the same settings, or {restart}."
        )


class RunState(keras.callbacks.Callback):
    """Saves model + optimizer + step every `every_steps` steps (0: only at epoch ends) and the
    best `inference_model` by `monitor`; `restore` loads the latest good state into a model.

    A save is pending until a finite loss computed from its weights makes it the good state
    (see the module docstring). `write=False` (processes other than the chief) keeps count
    but writes nothing; `saving(model)` is the context manager every process enters around
    each save (`distribution.Plan.saving`). That the processes of a run resume from one state
    is checked before `restore`, by `run_agreement.check_same_state`.
    """

    def __init__(self, run_dir, inference_model, *, every_steps=0, monitor="val_accuracy", fingerprint=None, write=True,
                 saving=lambda model: contextlib.nullcontext(), collective_save=False):
        super().__init__()
        self.run_dir = run_dir
        self.directory = run_folder.path(run_dir, run_folder.CHECKPOINT)
        self.inference_model = inference_model
        self.every_steps = int(every_steps)
        self.monitor = monitor
        self.mode = "min" if "loss" in monitor else "max"
        self.fingerprint = fingerprint or {}
        self.write = write
        self.saving = saving
        self.collective_save = collective_save
        self.step = 0
        self.best = None
        self.best_epoch = None
        self.good = None  # (file name, step) of the state to resume from
        self.pending = None  # (file name, step) saved, no loss computed from it yet

    @property
    def best_path(self):
        return run_folder.path(self.run_dir, run_folder.BEST)

    @property
    def good_path(self):
        return None if self.good is None else os.path.join(self.directory, self.good[0])

    @property
    def good_step(self):
        return None if self.good is None else self.good[1]

    def tidy(self):
        """Removes what a killed run left: temporary files, and saved states never confirmed."""
        if not self.write:
            return
        remove_stale(self.run_dir)
        remove_stale(self.directory)
        try:
            state = proven_state(self.directory)
        except BadRunState:  # `restore` says why; nothing is deleted before the state to keep is whole
            return
        if state is not None and os.path.isdir(self.directory):
            for name in os.listdir(self.directory):
                if WEIGHTS_NAME.fullmatch(name) and name != state.get("weights"):
                    os.remove(os.path.join(self.directory, name))

    def restore(self, model, total=None):
        """Loads the saved state into `model` (compiled); returns the step it continues from.
        Refused in one line: other settings (`SettingsChanged`; a setting its fingerprint does
        not hold, from an older version, is not compared), a step past `total`, weights that do
        not fit `model` (`BadRunState`)."""
        state = proven_state(self.directory)
        if state is None:
            return 0
        saved = state["fingerprint"]
        changed = {k: (saved[k], v) for k, v in self.fingerprint.items() if k in saved and saved[k] != v}
        if changed:
            raise SettingsChanged(self.run_dir, changed)
        path = os.path.join(self.directory, STATE)
        if total is not None and state["step"] > total:
            raise BadRunState(f"{path} is at step {state['step']}, past the end of this run ({total} steps): give more "
                              "steps or epochs to continue it, or start over (--fresh, or another --output-dir).")
        if not model.optimizer.built:
            model.optimizer.build(model.trainable_variables)
        try:
            model.load_weights(os.path.join(self.directory, state["weights"]))
        except (ValueError, KeyError, TypeError) as error:
            reason = (str(error).strip().splitlines() or [type(error).__name__])[0][:200]
            raise BadRunState(f"{path}: its weights do not fit this run's model ({reason}); resume with the run's "
                              "settings (its config.json), or start over (--fresh, or another --output-dir).") from None
        self.step = int(state["step"])
        self.good = (state["weights"], self.step)
        self.best, self.best_epoch = state.get("best"), state.get("best_epoch")
        return self.step

    def _improved(self, value):
        if value is None or not math.isfinite(value):
            return False
        if self.best is None:
            return True
        return value > self.best if self.mode == "max" else value < self.best

    def _save(self):
        """Writes the weights of this step as the pending state."""
        name = f"step-{self.step}.weights.h5"
        if any(saved is not None and saved[0] == name for saved in (self.pending, self.good)):
            return
        self.discard_pending()
        path = os.path.join(self.directory, name)
        with self.saving(self.model), save_target(path, self.write, self.collective_save) as tmp:
            if tmp:
                check_room(self.model, tmp)
                with one_line_errors(path):
                    self.model.save_weights(tmp)
        self.pending = (name, self.step)

    def save_now(self):
        """Saves this step's state and makes it the one to resume from if every weight is
        finite (a stop between checkpoints); returns whether it did."""
        if not all(np.isfinite(keras.ops.convert_to_numpy(v)).all() for v in self.model.trainable_variables):
            return False
        self._save()
        self._confirm()
        return True

    def _confirm(self):
        """A finite loss came from the pending weights: they become the state to resume from."""
        if self.pending is None:
            return
        name, step = self.pending
        if self.write:
            previous = read_state(self.directory)
            state = {"step": step, "weights": name, "best": self.best, "best_epoch": self.best_epoch,
                     "fingerprint": self.fingerprint}
            with one_line_errors(os.path.join(self.directory, STATE)):
                write_json(os.path.join(self.directory, STATE), state)
            if previous is not None and previous["weights"] != name:
                old = os.path.join(self.directory, previous["weights"])
                if os.path.exists(old):
                    os.remove(old)
        self.good, self.pending = self.pending, None

    def discard_pending(self):
        """Deletes the pending weights (no finite loss came from them)."""
        if self.pending is not None and self.write:
            path = os.path.join(self.directory, self.pending[0])
            if os.path.exists(path):
                os.remove(path)
        self.pending = None

    def on_train_batch_end(self, batch, logs=None):
        self.step += 1
        if _finite(_number((logs or {}).get("loss"))):  # computed from the weights of the previous step
            self._confirm()
        if self.every_steps and self.step % self.every_steps == 0:
            self._save()

    def on_epoch_end(self, epoch, logs=None):
        logs = logs or {}
        val_loss = _number(logs.get("val_loss"))
        if _finite(val_loss) and self._improved(_number(logs.get(self.monitor))):
            self.best, self.best_epoch = _number(logs.get(self.monitor)), epoch + 1
            with self.saving(self.model), ema.averaged(self.model), \
                    save_target(self.best_path, self.write, self.collective_save) as tmp:
                if tmp:
                    check_room(self.inference_model, tmp)
                    with one_line_errors(self.best_path):
                        self.inference_model.save(tmp)
        self._save()
        if val_loss is not None and math.isfinite(val_loss):  # computed from the weights just saved
            self._confirm()
