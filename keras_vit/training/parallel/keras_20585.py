"""A workaround for keras-team/keras#20585: Keras 3 cannot `fit` under TensorFlow's
`MultiWorkerMirroredStrategy`.

Before the first step, Keras' TensorFlow trainer (`_maybe_symbolic_build`) takes one batch
of the distributed dataset and averages it over the replicas with `strategy.reduce`, only
to learn the batch's shapes and dtypes for building the metrics. With several workers that
reduce is a cross-worker collective which cannot take the eager `PerReplica` batch, and
`fit` fails with "Attempt to convert a value (PerReplica:{...}) ... to a Tensor". The
patched method takes this worker's first local replica's batch instead (same shapes, no
collective). Past it, every step averages its (scalar) logs over the workers with
`strategy.reduce("MEAN", value, axis=0)`, which fails on a scalar ("Invalid reduction
dimension 0 for input with 0 dimensions"); the patched reduction averages scalars over the
replicas (`axis=None`) and leaves everything else to Keras. (Those per-step logs average
the replicas' own metric values; the epoch logs are read from the metrics' summed states,
exact over all workers.)

`patch(model)` replaces the build method on that model only; the reduction is patched in
Keras' TensorFlow trainer module, where it changes only multi-worker means. When a Keras
release fixes the bug, tests/test_training_multihost_tf_torch.py says so (the unpatched `fit` no
longer fails) and this module can go.
"""

import types

import tensorflow as tf
from keras.src import tree
from keras.src.backend.tensorflow import trainer as tf_trainer

_KERAS_REDUCE = tf_trainer.reduce_per_replica


def _first_local(value):
    if isinstance(value, tf.distribute.DistributedValues):
        return value.values[0]
    return value


def _symbolic_build_from_local_batch(model, iterator=None, data_batch=None):
    if model._distribute_strategy is None:  # as Keras: built when the step is traced
        return
    if iterator is not None:
        for _, _, batches in iterator:
            data_batch = tree.map_structure(_first_local, next(batches))
            break
    with model.distribute_strategy.scope():
        model._symbolic_build(data_batch=data_batch)


def _reduce_per_replica(values, strategy, reduction):
    if reduction not in ("auto", "mean") or not tf_trainer._collective_all_reduce_multi_worker(strategy):
        return _KERAS_REDUCE(values, strategy, reduction)

    def mean(value):
        rank = _first_local(value).shape.rank
        return strategy.reduce("MEAN", value, axis=None if rank == 0 else 0)

    return tree.map_structure(mean, values)


def patch(model):
    """Makes `model.fit` / `evaluate` work under a multi-worker strategy (in place)."""
    tf_trainer.reduce_per_replica = _reduce_per_replica
    model._maybe_symbolic_build = types.MethodType(_symbolic_build_from_local_batch, model)
    return model
