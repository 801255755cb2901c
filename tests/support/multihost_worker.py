"""One host of a JAX multi-host run on loopback (for test_multihost_jax and test_run_moves).

Usage: python multihost_worker.py RUN_DIR OUT_JSON [KEY=VALUE ...]   (the caller sets the
launch variables, e.g. KERAS_DISTRIBUTION_JOB_ADDRESSES / _NUM_PROCESSES / _PROCESS_ID, and
XLA_FLAGS). Trains a tiny ViT on 320 digits (256 for training: 8 steps of 32) with step
checkpoints; KEY=VALUE sets any training field, and `kill_at=N` SIGKILLs this process after
step N (a host lost), `stop_after_epoch=N` ends it (exit 0) once epoch N's state is saved (a
preempted job). Writes the loss history (with a teacher, `teacher=PATH distill=soft`, the label
and distillation losses too), the resumed step and a checksum of the final weights to OUT_JSON;
a refused run prints one line "error: ..." and exits 2.
"""

import json
import os
import signal
import sys

import keras
import numpy as np
from sklearn.datasets import load_digits

from keras_vit.training import recipe, train

RUN_DIR, OUT = sys.argv[1], sys.argv[2]
overrides = dict(arg.split("=", 1) for arg in sys.argv[3:])
kill_at, stop_after_epoch = (int(overrides.pop(key, 0)) for key in ("kill_at", "stop_after_epoch"))
digits = load_digits()
data = ((digits.images[:320] * (255 / 16)).astype("uint8"), digits.target[:320])
config = recipe(
    "digits", image_size=8, patch_size=4, hidden_dim=16, depth=1, num_heads=2, mlp_dim=32,
    batch_size=32, epochs=2, learning_rate=5e-3, warmup_steps=2, tensorboard=False,
    verbose=0, val_fraction=0.2, strategy="data_parallel", output_dir=RUN_DIR, checkpoint_every=3, host_timeout=60,
).override([f"{key}={value}" for key, value in overrides.items()])


class Stop(keras.callbacks.Callback):
    """After the run's own callbacks (the run state saved): a kill or a clean stop."""

    steps = 0

    def on_train_batch_end(self, batch, logs=None):
        Stop.steps += 1
        if Stop.steps == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)

    def on_epoch_end(self, epoch, logs=None):
        if epoch + 1 == stop_after_epoch:
            os._exit(0)


try:
    result = train(config, data=data, callbacks=[Stop()])
except ValueError as error:  # as the command line: one line, exit code 2
    print(f"error: {error}", file=sys.stderr)
    sys.exit(2)
weights = [np.asarray(v.value.addressable_data(0)) if hasattr(v.value, "addressable_data") else np.asarray(v)
           for v in result.model.weights]
with open(OUT, "w") as handle:
    json.dump({"loss": result.history.get("loss", []), "resumed_from": result.resumed_from, "steps": result.steps,
               "distilled": {k: result.history[k] for k in ("label_loss", "distill_loss") if k in result.history},
               "top1": result.top1, "val_loss": result.val_loss, "sum": float(sum(np.abs(w).sum() for w in weights)),
               "first": weights[0].ravel()[:8].tolist()}, handle)
