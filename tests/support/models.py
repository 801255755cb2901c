"""Model helpers of the tests: random weights, shapes without values, and values with gradients
on any backend."""

import contextlib

import keras
import numpy as np
from keras import ops
from keras.src.backend.common import global_state

from tests.support import BACKEND


def randomize(model, seed=0, scale=0.2):
    """Gives every variable random values (LayerNorm scales near 1), so no weight is trivial."""
    rng = np.random.default_rng(seed)
    values = []
    for variable in model.weights:
        shape = tuple(variable.shape)
        if variable.path.endswith("gamma"):
            values.append(1.0 + scale * rng.standard_normal(shape))
        else:
            values.append(scale * rng.standard_normal(shape))
    model.set_weights([v.astype(np.float32) for v in values])
    return model


@contextlib.contextmanager
def shapes_only():
    """Variables created inside get their shapes but no values (Keras' deferred initialisation,
    which `keras.StatelessScope` gives) and are dropped on exit: big models built in here cost
    no memory or initialisation. Read them (`count_params`, `output_shape`) inside."""
    try:
        with keras.StatelessScope(initialize_variables=False):
            yield
    finally:
        global_state.set_global_attribute("uninitialized_variables", [])


def value_and_grads(fn, *args):
    """`fn(*args)` (a scalar) and its gradients with respect to every argument."""
    if BACKEND == "jax":
        import jax

        value, grads = jax.value_and_grad(fn, argnums=tuple(range(len(args))))(*args)
    elif BACKEND == "tensorflow":
        import tensorflow as tf

        args = [tf.convert_to_tensor(a) for a in args]
        with tf.GradientTape() as tape:
            tape.watch(args)
            value = fn(*args)
        grads = tape.gradient(value, args)
    else:
        import torch

        args = [torch.tensor(a, requires_grad=True) for a in args]
        value = fn(*args)
        grads = torch.autograd.grad(value, args)
        value = value.detach()
    return float(ops.convert_to_numpy(value)), [ops.convert_to_numpy(g) for g in grads]
