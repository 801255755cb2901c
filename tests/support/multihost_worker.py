"""One host of a JAX multi-host run on loopback (for test_training_multihost).

Usage: python multihost_worker.py RUN_DIR OUT_JSON [KEY=VALUE ...]   (the caller sets the
launch variables, e.g. KERAS_DISTRIBUTION_JOB_ADDRESSES / _NUM_PROCESSES / _PROCESS_ID, and
XLA_FLAGS). Trains a tiny ViT on 256 digits with step checkpoints; writes the loss history,
the resumed step and a checksum of the final weights to OUT_JSON.
"""

import json
import sys

import numpy as np
from sklearn.datasets import load_digits

from keras_vit.training import recipe, train

RUN_DIR, OUT = sys.argv[1], sys.argv[2]
overrides = dict(arg.split("=", 1) for arg in sys.argv[3:])
digits = load_digits()
data = ((digits.images[:320] * (255 / 16)).astype("uint8"), digits.target[:320])
config = recipe(
    "digits", image_size=8, patch_size=4, hidden_dim=16, depth=1, num_heads=2, mlp_dim=32,
    batch_size=32, epochs=int(overrides.get("epochs", 2)), learning_rate=5e-3, warmup_steps=2, tensorboard=False,
    verbose=0, val_fraction=0.2, strategy=overrides.get("strategy", "data_parallel"), output_dir=RUN_DIR,
    checkpoint_every=int(overrides.get("checkpoint_every", 3)), host_timeout=float(overrides.get("host_timeout", 60)),
    model_parallel_size=int(overrides.get("model_parallel_size", 2)),
)
result = train(config, data=data)
weights = [np.asarray(v.value.addressable_data(0)) if hasattr(v.value, "addressable_data") else np.asarray(v)
           for v in result.model.weights]
with open(OUT, "w") as handle:
    json.dump({"loss": result.history.get("loss", []), "resumed_from": result.resumed_from, "steps": result.steps,
               "top1": result.top1, "val_loss": result.val_loss, "sum": float(sum(np.abs(w).sum() for w in weights)),
               "first": weights[0].ravel()[:8].tolist()}, handle)
