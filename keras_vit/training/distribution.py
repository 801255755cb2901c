"""Distribution strategies per backend, behind one small interface (`Plan`).

| strategy | backend | what |
|---|---|---|
| "none" | all | one device |
| "mirrored" | tensorflow | `tf.distribute.MirroredStrategy` over the local GPUs (or CPUs) |
| "tpu" | tensorflow | `tf.distribute.TPUStrategy` (TPU address from `TPU_NAME`, default local) |
| "multi_worker" | tensorflow | `tf.distribute.MultiWorkerMirroredStrategy`, hosts from `TF_CONFIG` |
| "data_parallel" | jax | `keras.distribution.DataParallel` over all devices (of all hosts) |
| "model_parallel" | jax | `keras.distribution.ModelParallel`: a (batch, model) device mesh, the big attention / MLP kernels sharded over "model" (for L/H models) |
| "torch_ddp" | torch | `torch.distributed` data parallelism, launched by `torchrun` (see `torch_ddp`) |

"auto" picks: TPU -> "tpu"; several GPUs -> "mirrored"; `TF_CONFIG` with several workers
-> "multi_worker" (TensorFlow); several devices -> "data_parallel" (JAX); `WORLD_SIZE > 1`
-> "torch_ddp" (PyTorch); else "none". JAX multi-host jobs are joined with
`keras.distribution.initialize()` when `KERAS_DISTRIBUTION_JOB_ADDRESSES` (or
`JAX_COORDINATOR_ADDRESS`) is set.

The global batch size is what one optimizer step sees over all replicas; each replica gets
`global_batch / replicas` (it must divide evenly).
"""

import contextlib
import dataclasses
import json
import os
from typing import Callable

import keras

from keras_vit.training.recipes import STRATEGIES

# Variable-path patterns of the big ViT kernels and how ModelParallel shards them.
VIT_LAYOUT = {
    r".*attention/qkv/kernel": (None, "model"),
    r".*attention/qkv/bias": ("model",),
    r".*attention/out/kernel": ("model", None),
    r".*mlp/dense_0/kernel": (None, "model"),
    r".*mlp/dense_0/bias": ("model",),
    r".*mlp/dense_1/kernel": ("model", None),
}


@dataclasses.dataclass
class Plan:
    """How to build, feed and run a model under a strategy.

    `replicas`: devices one global batch is split over. `shard`: `(num_shards, index)` of
    the training data this process reads (processes that each feed their own replica).
    `part`: `(parts, index)`: this process reads only its part of each global batch, which
    stays the batch one process would read (see `pipeline.train_dataset`).
    `scope`: a context manager to build and compile the model in. `prepare(model)`: run
    after `compile`. `feed(dataset)`: the training dataset as `fit` takes it.
    `is_chief`: whether this process writes checkpoints and logs. `collective_save`: saving
    is collective (every process must take part; the others write a throw-away file).
    `pad_multiple`: evaluation batches are padded to a multiple of it. `gather(values)`:
    a list of ints from every process, rank by rank (a collective).
    """

    name: str
    replicas: int = 1
    shard: tuple = (1, 0)
    part: tuple = (1, 0)
    is_chief: bool = True
    collective_save: bool = False
    pad_multiple: int = 1
    scope: Callable = contextlib.nullcontext
    prepare: Callable = lambda model: None
    feed: Callable = lambda dataset: dataset
    gather: Callable = lambda values: [list(values)]

    def per_process_batch(self, global_batch):
        """The batch size the input pipeline of this process produces."""
        if global_batch % self.replicas:
            raise ValueError(
                f"The global batch size {global_batch} (per optimizer micro-step) is not divisible "
                f"by the {self.replicas} replicas of strategy {self.name!r}."
            )
        return global_batch // (self.shard[0] * self.part[0])


def _tf_plan(name):
    import tensorflow as tf

    if name == "auto":
        config = json.loads(os.environ.get("TF_CONFIG", "{}") or "{}")
        workers = len(config.get("cluster", {}).get("worker", []))
        if workers > 1:
            name = "multi_worker"
        elif os.environ.get("TPU_NAME") or tf.config.list_logical_devices("TPU"):
            name = "tpu"
        elif len(tf.config.list_logical_devices("GPU")) > 1:
            name = "mirrored"
        else:
            return Plan("none")
    if name == "none":
        return Plan("none")
    if name == "mirrored":
        strategy = tf.distribute.MirroredStrategy()
    elif name == "tpu":
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=os.environ.get("TPU_NAME", ""))
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        strategy = tf.distribute.TPUStrategy(resolver)
    else:
        return _tf_multi_worker_plan(tf.distribute.MultiWorkerMirroredStrategy())
    replicas = strategy.num_replicas_in_sync
    pad = replicas if name == "tpu" else 1  # TPUs need evaluation batches that split evenly
    return Plan(name, replicas=replicas, is_chief=_tf_chief(strategy), pad_multiple=pad, scope=strategy.scope)


def _tf_multi_worker_plan(strategy):
    """Each worker reads its part of every global batch and feeds its own replicas; saving
    is collective; Keras' multi-worker `fit` is patched (see `keras_20585`)."""
    from keras_vit.training import keras_20585, tf_multi_worker

    return Plan(
        "multi_worker",
        replicas=strategy.num_replicas_in_sync,
        part=tf_multi_worker.worker_position(strategy),
        is_chief=_tf_chief(strategy),
        collective_save=True,
        scope=strategy.scope,
        prepare=keras_20585.patch,
        feed=tf_multi_worker.feeder(strategy),
        gather=tf_multi_worker.gatherer(strategy),
    )


def _tf_chief(strategy):
    """The chief of a multi-worker cluster: its "chief" task, else worker 0."""
    resolver = strategy.cluster_resolver
    if resolver is None or not resolver.task_type:
        return True
    if "chief" in resolver.cluster_spec().jobs:
        return resolver.task_type == "chief"
    return resolver.task_type == "worker" and resolver.task_id == 0


def _jax_multi_host():
    if os.environ.get("KERAS_DISTRIBUTION_JOB_ADDRESSES") or os.environ.get("JAX_COORDINATOR_ADDRESS"):
        import jax

        if not jax.distributed.is_initialized():
            keras.distribution.initialize()


def model_parallel_layout(devices, model_axis):
    """A `LayoutMap` on a `(batch, model)` mesh with `VIT_LAYOUT`'s kernels sharded."""
    if model_axis < 1 or len(devices) % model_axis:
        raise ValueError(f"model_parallel_size={model_axis} must divide the {len(devices)} devices.")
    mesh = keras.distribution.DeviceMesh(
        shape=(len(devices) // model_axis, model_axis), axis_names=("batch", "model"), devices=devices
    )
    layout = keras.distribution.LayoutMap(mesh)
    for pattern, axes in VIT_LAYOUT.items():
        layout[pattern] = axes
    return layout


def _jax_plan(name, model_parallel_size):
    import jax

    _jax_multi_host()
    devices = keras.distribution.list_devices()
    if name == "auto":
        name = "data_parallel" if len(devices) > 1 else "none"
    if name == "none":
        return Plan("none")
    if name == "data_parallel":
        distribution = keras.distribution.DataParallel(devices=devices)
        batch_replicas = len(devices)
    else:
        layout = model_parallel_layout(devices, model_parallel_size)
        distribution = keras.distribution.ModelParallel(layout_map=layout, batch_dim_name="batch")
        batch_replicas = len(devices) // model_parallel_size
    return Plan(
        name,
        replicas=batch_replicas,
        is_chief=jax.process_index() == 0,
        pad_multiple=batch_replicas,
        scope=distribution.scope,
    )


def _torch_plan(name):
    from keras_vit.training import torch_ddp

    if name == "auto":
        name = "torch_ddp" if torch_ddp.launched() else "none"
    if name == "none":
        return Plan("none")
    world_size, rank = torch_ddp.init_process_group()
    return Plan(
        name,
        replicas=world_size,
        part=(world_size, rank),
        is_chief=rank == 0,
        prepare=torch_ddp.prepare,
        gather=torch_ddp.all_gather_rows,
    )


def plan(strategy="auto", model_parallel_size=2):
    """The `Plan` for `strategy` on the current Keras backend."""
    backend = keras.backend.backend()
    accepted = STRATEGIES.get(backend, ("auto", "none"))
    if strategy not in accepted:
        every = sorted({s for names in STRATEGIES.values() for s in names})
        hint = f" (strategy {strategy!r} is for another backend)" if strategy in every else ""
        raise ValueError(
            f"strategy={strategy!r} is not available on the {backend} backend{hint}; "
            f"expected one of {accepted}."
        )
    if backend == "tensorflow":
        return _tf_plan(strategy)
    if backend == "jax":
        return _jax_plan(strategy, model_parallel_size)
    if backend == "torch":
        return _torch_plan(strategy)
    return Plan("none")
