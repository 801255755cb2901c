"""Trains a tiny ViT under distribution strategies in its own process (for tests/training/test_distributed.py).

Usage: python tests/support/worker.py STRATEGY[,STRATEGY...] OUT_DIR [TEACHER]   (KERAS_BACKEND chosen by
the caller; torch_ddp is launched with torchrun). A name STRATEGY+teacher trains STRATEGY distilling from
TEACHER (a `.keras` file, `distill=soft`), so one process covers both. Writes OUT_DIR/result-<name>-<rank>.json with
the loss history, whether each variable's replicas are identical (and how JAX's ModelParallel
sharded them), and OUT_DIR/weights-<strategy>-<rank>.npz with the trained weights.
"""

import json
import os
import sys

STRATEGIES, OUT = sys.argv[1].split(","), sys.argv[2]
TEACHER = sys.argv[3] if len(sys.argv) > 3 else None
BACKEND = os.environ["KERAS_BACKEND"]
if BACKEND == "jax":
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=2".strip()
if BACKEND == "tensorflow":
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)

import keras  # noqa: E402
import numpy as np  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402

from keras_vit.training import recipe, train  # noqa: E402


def replicas(variable):
    """The copies of a variable held by each device / replica, as NumPy arrays."""
    value = variable.value
    if BACKEND == "tensorflow" and hasattr(value, "values"):
        return [np.asarray(v) for v in value.values]
    if BACKEND == "jax":
        return [np.asarray(shard.data) for shard in value.addressable_shards]
    return [keras.ops.convert_to_numpy(value)]


def run(name):
    strategy, teacher = name.removesuffix("+teacher"), name.endswith("+teacher")
    rank = int(os.environ.get("RANK", "0"))
    digits = load_digits()
    data = ((digits.images[:512] * (255 / 16)).astype("uint8"), digits.target[:512])
    config = recipe(
        "digits", image_size=8, patch_size=2, hidden_dim=32, depth=1, num_heads=2, mlp_dim=64,
        batch_size=32, epochs=2, learning_rate=5e-3, warmup_steps=2, tensorboard=False, verbose=0,
        val_fraction=0.25, strategy=strategy, output_dir=os.path.join(OUT, name), deterministic=True,
        jit_compile=BACKEND == "jax", **(dict(teacher=TEACHER, distill="soft") if teacher else {}),
    )
    report = {"identical": True, "changed": 0, "replica_counts": [], "sharded": {}}
    arrays, initial = {}, {}

    class Inspect(keras.callbacks.Callback):
        """Snapshots the weights at the start; at the end compares every replica of each."""

        def on_train_begin(self, logs=None):
            initial.update({v.path: replicas(v)[0].copy() for v in self.model.trainable_weights})

        def on_train_end(self, logs=None):
            for variable in self.model.trainable_weights:
                copies = replicas(variable)
                arrays[variable.path] = copies[0]
                report["replica_counts"].append(len(copies))
                report["identical"] &= all(np.array_equal(copies[0], c) for c in copies[1:])
                if BACKEND == "jax" and strategy == "model_parallel":
                    shapes = sorted({tuple(s.data.shape) for s in variable.value.addressable_shards})
                    report["sharded"][variable.path] = [list(variable.shape), [list(s) for s in shapes]]

    result = train(config, data=data, callbacks=[Inspect()])
    report.update(strategy=result.strategy, loss=result.history["loss"], top1=result.top1, steps=result.steps,
                  logged={key: result.history[key] for key in ("label_loss", "distill_loss") if key in result.history})
    report["changed"] = sum(not np.allclose(arrays[p], initial[p]) for p in initial)
    np.savez(os.path.join(OUT, f"weights-{name}-{rank}.npz"), **{k.replace("/", "|"): v for k, v in arrays.items()})
    with open(os.path.join(OUT, f"result-{name}-{rank}.json"), "w") as handle:
        json.dump(report, handle)

if __name__ == "__main__":
    for name in STRATEGIES:
        run(name)
