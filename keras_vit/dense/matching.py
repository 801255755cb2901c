"""The Hungarian matching of EoMT's loss: `scipy.optimize.linear_sum_assignment` on the host, reached
from each backend's graph by one small function (JAX: `jax.pure_callback`, TensorFlow:
`tf.numpy_function`, PyTorch: plain NumPy, its steps run eagerly), so that every backend matches
with the same solver and gets the same assignment. The cost matrices are tiny (queries x classes
present), the solver exact; an in-graph solver (an auction or a differentiable relaxation) would be
approximate or a loop of data-dependent length that XLA compiles poorly."""

import keras
import numpy as np
from keras import ops


def assign_numpy(cost, present):
    """`(batch, queries, targets)` float32 0/1: query q matched to target k, by the least total `cost`
    over the targets `present` (`(batch, targets)` bool) of each image; the others get no query."""
    from scipy.optimize import linear_sum_assignment

    cost, present = np.asarray(cost, np.float64), np.asarray(present, bool)
    matched = np.zeros(cost.shape, np.float32)
    for b in range(cost.shape[0]):
        columns = np.flatnonzero(present[b])
        if columns.size:
            rows, picked = linear_sum_assignment(np.nan_to_num(cost[b][:, columns], nan=1e30, posinf=1e30,
                                                               neginf=1e30))
            matched[b, rows, columns[picked]] = 1.0
    return matched


def assign(cost, present):
    """`assign_numpy` on this backend's tensors, inside its traced or eager step; no gradient."""
    backend = keras.backend.backend()
    cost, present = ops.stop_gradient(ops.cast(cost, "float32")), ops.cast(present, "bool")
    if backend == "jax":
        import jax

        shape = jax.ShapeDtypeStruct(cost.shape, np.float32)
        return jax.pure_callback(assign_numpy, shape, cost, present, vmap_method="sequential")
    if backend == "tensorflow":
        import tensorflow as tf

        matched = tf.numpy_function(assign_numpy, [cost, present], tf.float32, stateful=False)
        return tf.ensure_shape(matched, cost.shape)
    if backend == "torch":
        import torch

        matched = assign_numpy(cost.detach().cpu().numpy(), present.detach().cpu().numpy())
        return torch.as_tensor(matched, device=cost.device)
    return ops.convert_to_tensor(assign_numpy(ops.convert_to_numpy(cost), ops.convert_to_numpy(present)))
