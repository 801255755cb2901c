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
-> "torch_ddp" (PyTorch); else "none". A JAX multi-host job is joined (`jax.distributed`)
when `KERAS_DISTRIBUTION_JOB_ADDRESSES` (coordinator first; with `_NUM_PROCESSES`,
`_PROCESS_ID`) or `JAX_COORDINATOR_ADDRESS` (with `JAX_NUM_PROCESSES`, `JAX_PROCESS_ID`) is
set, or in a Slurm step of several tasks (`SLURM_NTASKS > 1`, which JAX reads itself).

On several JAX processes each one reads and augments only its part of every global batch
(`Plan.part`), and the run state is saved by all processes together (`Plan.saving`): those
that hold part of a sharded variable send it to the chief, which alone writes the file.

The global batch size is what one optimizer step sees over all replicas; each replica gets
`global_batch / replicas` (it must divide evenly).
"""

import contextlib
import dataclasses
import json
import os
from typing import Callable, Optional

import keras
import numpy as np

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

    `replicas`: devices one global batch is split over. `shard`: `(num_shards, index)` of the
    training data this process reads. `part`: `(parts, index)`: this process reads only part
    `index` of each global batch, which stays the batch one process would read (see
    `pipeline.train_dataset`). `is_chief`: whether this process writes checkpoints and logs.
    `collective_save`: every process must take part in a save (the others write a throw-away
    file). `pad_multiple`: evaluation batches are padded to a multiple of it. `scope`: a
    context manager to build and compile the model in. `prepare(model)`: run after `compile`.
    `saving(model)`: a context manager every process enters around a save of `model`'s state
    (JAX: sharded variables gathered), inside which the chief alone writes. `processes`,
    `process_index`: how many processes run the job and which this is. `allgather(int)`: every
    process's value, in process order, and `gather(values)`: a list of ints from every process,
    rank by rank (collectives). `feed(dataset)`: the training dataset as `fit` takes it.
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
    saving: Callable = lambda model: contextlib.nullcontext()
    processes: int = 1
    process_index: int = 0
    allgather: Optional[Callable] = None
    feed: Callable = lambda dataset: dataset
    gather: Callable = lambda values: [list(values)]

    def per_process_batch(self, global_batch):
        """The batch size the input pipeline of this process produces."""
        if global_batch % self.replicas:
            raise ValueError(
                f"The global batch size {global_batch} (per optimizer micro-step) is not divisible "
                f"by the {self.replicas} replicas of strategy {self.name!r}."
            )
        return global_batch // self.shard[0] // self.part[0]


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
    from keras_vit.training.parallel import keras_20585, tf_multi_worker

    workers, index = tf_multi_worker.worker_position(strategy)
    gather = tf_multi_worker.gatherer(strategy)
    return Plan(
        "multi_worker",
        replicas=strategy.num_replicas_in_sync,
        part=(workers, index),
        is_chief=_tf_chief(strategy),
        collective_save=True,
        scope=strategy.scope,
        prepare=keras_20585.patch,
        feed=tf_multi_worker.feeder(strategy),
        gather=gather,
        processes=workers,
        process_index=index,
        allgather=lambda value: [row[0] for row in gather([value])],
    )


def _tf_chief(strategy):
    """The chief of a multi-worker cluster: its "chief" task, else worker 0."""
    resolver = strategy.cluster_resolver
    if resolver is None or not resolver.task_type:
        return True
    if "chief" in resolver.cluster_spec().jobs:
        return resolver.task_type == "chief"
    return resolver.task_type == "worker" and resolver.task_id == 0


JAX_LAUNCH = (
    ("KERAS_DISTRIBUTION_JOB_ADDRESSES", "KERAS_DISTRIBUTION_NUM_PROCESSES", "KERAS_DISTRIBUTION_PROCESS_ID"),
    ("JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID"),
)


def _jax_multi_host(heartbeat_seconds):
    """Joins the JAX job the environment describes (see the module docstring); a no-op on one
    process. `heartbeat_seconds`: after it, JAX itself treats a silent process as dead."""
    import jax

    if jax.distributed.is_initialized():
        return
    heartbeat = max(10, int(heartbeat_seconds) * 2)  # longer than the watch of `hosts`, which says more
    if int(os.environ.get("SLURM_NTASKS", "1")) > 1 and not any(os.environ.get(names[0]) for names in JAX_LAUNCH):
        jax.distributed.initialize(heartbeat_timeout_seconds=heartbeat)  # JAX reads Slurm's variables
        return
    for names in JAX_LAUNCH:
        address, count, index = (os.environ.get(name) for name in names)
        if not address:
            continue
        missing = [name for name, value in zip(names[1:], (count, index)) if not value]
        if missing:
            raise ValueError(f"{names[0]} is set but {' and '.join(missing)} not: set all three on every host.")
        try:
            count, index = int(count), int(index)
        except ValueError:
            raise ValueError(f"{names[1]}={count!r} and {names[2]}={index!r} must be whole numbers.") from None
        if not 0 <= index < count:
            raise ValueError(f"{names[2]}={index} must be in [0, {names[1]}={count}).")
        jax.distributed.initialize(address.split(",")[0], count, index, heartbeat_timeout_seconds=heartbeat)
        return


def _warm_saving_caches():
    """Keras' savers build throw-away objects once per process (`saving_lib.get_attr_skipset`:
    an `Optimizer`, whose variables on a multi-process mesh are a collective). Built here by
    every process at the same time, outside any distribution, no later save or load makes one."""
    from keras.src.saving import saving_lib

    with _no_distribution():
        for kind in ("Operation", "Layer", "Functional", "Sequential", "Metric", "Optimizer", "Loss"):
            saving_lib.get_attr_skipset(kind)


@contextlib.contextmanager
def _no_distribution():
    previous = keras.distribution.distribution()
    keras.distribution.set_distribution(None)
    try:
        yield
    finally:
        keras.distribution.set_distribution(previous)


def _state_variables(model):
    seen = {}
    for variable in [*model.variables, *model.metrics_variables, *getattr(model.optimizer, "variables", [])]:
        seen.setdefault(id(variable), variable)
    return list(seen.values())


@contextlib.contextmanager
def _jax_host_copies(model, is_chief):
    """Entered by every process together: the variables of `model` (with its optimizer and
    metrics) are fetched to the chief's memory (a gather, where a variable is sharded over
    processes, that every process joins) and, inside, hold those copies with no distribution
    active, so Keras' savers run on the chief alone and enter no collective. All leave together,
    once the chief has written."""
    from jax.experimental import multihost_utils

    copies = []
    for variable in _state_variables(model):
        value = variable._value
        if not (value.is_fully_addressable or value.is_fully_replicated):
            copies.append((variable, value, multihost_utils.process_allgather(value, tiled=True)))
        elif is_chief:
            copies.append((variable, value, np.asarray(value)))
    if is_chief:
        try:
            for variable, _, copy in copies:
                variable._value = copy
            with _no_distribution():
                yield
        finally:
            for variable, value, _ in copies:
                variable._value = value
    else:
        yield
    multihost_utils.sync_global_devices("keras_vit saved")  # no process reads a file before it is written


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


def _data_part(model_parallel_size):
    """`(parts, index)` of each global batch this JAX process feeds: its rows of the
    `(batch, model)` mesh (processes that share a model replica read the same part)."""
    import jax

    processes, local = jax.process_count(), jax.local_device_count()
    if model_parallel_size <= local:
        if local % model_parallel_size:
            raise ValueError(f"model_parallel_size={model_parallel_size} must divide the {local} devices of each host.")
        return processes, jax.process_index()
    if model_parallel_size % local:
        raise ValueError(f"model_parallel_size={model_parallel_size} must be a multiple of the {local} devices of each host.")
    per_replica = model_parallel_size // local
    return processes // per_replica, jax.process_index() // per_replica


def _jax_plan(name, model_parallel_size, heartbeat_seconds):
    import jax
    from jax.experimental import multihost_utils

    if name != "none":
        _jax_multi_host(heartbeat_seconds)
    devices = keras.distribution.list_devices()
    if name == "auto":
        name = "data_parallel" if len(devices) > 1 else "none"
    if name == "none":
        return Plan("none")
    # each process feeds its own part of the batch (Keras' auto-sharding would build the
    # whole global batch on every process and drop the rest)
    if name == "data_parallel":
        distribution = keras.distribution.DataParallel(devices=devices, auto_shard_dataset=False)
        batch_replicas, part = len(devices), (jax.process_count(), jax.process_index())
    else:
        layout = model_parallel_layout(devices, model_parallel_size)
        distribution = keras.distribution.ModelParallel(
            layout_map=layout, batch_dim_name="batch", auto_shard_dataset=False
        )
        batch_replicas, part = len(devices) // model_parallel_size, _data_part(model_parallel_size)
    is_chief = jax.process_index() == 0
    if jax.process_count() > 1:
        _warm_saving_caches()
    return Plan(
        name,
        replicas=batch_replicas,
        is_chief=is_chief,
        pad_multiple=batch_replicas,
        scope=distribution.scope,
        part=part,
        saving=lambda model: _jax_host_copies(model, is_chief),
        processes=jax.process_count(),
        process_index=jax.process_index(),
        allgather=lambda value: [int(v) for v in multihost_utils.process_allgather(np.int32(value))],
    )


def _torch_plan(name):
    from keras_vit.training.parallel import torch_ddp

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
        processes=world_size,
        process_index=rank,
        gather=torch_ddp.all_gather_rows,
        allgather=lambda value: [row[0] for row in torch_ddp.all_gather_rows([value])],
    )


def plan(strategy="auto", model_parallel_size=2, host_timeout=300):
    """The `Plan` for `strategy` on the current Keras backend (`host_timeout`: seconds after
    which a silent peer process counts as lost, see `hosts`)."""
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
        return _jax_plan(strategy, model_parallel_size, host_timeout)
    if backend == "torch":
        return _torch_plan(strategy)
    return Plan("none")
