"""`jit_compile=True` on PyTorch with one dynamo compile per step function.

Keras' PyTorch trainer wraps each step function (train, test, predict) in `torch.compile`.
During the first steps, Keras itself makes dynamo compile them again and again (found with
`TORCH_LOGS=recompiles,graph_breaks`; 24 recompiles for a tiny ViT in two `train_on_batch` and
two `predict_on_batch` calls with NumPy batches):

- NumPy batches (`train_on_batch(x)`, `predict_on_batch(x)`) are converted to tensors inside
  the step. Dynamo cannot trace `ndarray.dtype` and breaks the graph there; every frame that
  the break cuts off (`Operation.__call__`, `Functional.call`, `convert_to_tensor`,
  `_setattr_hook`, ...) is then compiled on its own, and again for each input dtype,
  attribute name set and grad mode (training / inference). Here batches are converted
  before the compiled function is entered.
- The first training step finds no gradients in `zero_grad` (guard `p.grad is None`) and
  creates the optimizer's weight-decay cache (guard `hasattr(optimizer, ...)`), so the
  second step fails both guards. Here the first training step runs eagerly: the compiled
  function first runs in the state every later step sees.
- Keras compiles the training step as `one_step_on_data`, which calls `train_step`, which
  breaks the graph at `loss.backward()`. On a graph break dynamo throws its trace away and
  traces again up to the break; a break inside a called function also costs the caller's
  whole trace. So the forward pass was traced three times (`one_step_on_data`, then
  `train_step` twice) for the two graphs it keeps. Here `train_step` itself is compiled:
  the same graphs from two traces (`tests/layers/test_torch_compile_once.py` counts them).

`compile_once(model)` installs this on one model (a no-op on other backends, or with
`jit_compile` off); keras_vit's builders and trainer call it. A model loaded from a `.keras`
file is plain Keras again: call `compile_once` on it.
"""

import keras
import numpy as np


def _to_tensors(data):
    return keras.tree.map_structure(
        lambda value: keras.ops.convert_to_tensor(value) if isinstance(value, np.ndarray) else value, data
    )


def _converting(step):
    def run(data):
        return step(_to_tensors(data))

    return run


def _eager_first(step, eager):
    """`step`, with its first call replaced by `eager` (the same function, not compiled)."""
    calls = []

    def run(data):
        data = _to_tensors(data)
        if not calls:
            calls.append(1)
            return eager(data)
        return step(data)

    return run


def _compiled_train_step(model):
    """Keras' `one_step_on_data` (`train_step` on the batch `data[0]`) with `train_step`
    compiled rather than `one_step_on_data`: see the module docstring."""
    import torch

    step = torch.compile(model.train_step)

    def one_step_on_data(data):
        return step(data[0])

    return one_step_on_data


def _patched(model, kind, original):
    def make_function(force=False):
        if getattr(model, f"{kind}_function") is not None and not force:
            return getattr(model, f"{kind}_function")
        original(force=force)
        step = getattr(model, f"{kind}_function")
        eager = getattr(step, "_torchdynamo_orig_callable", None)
        if eager is None:  # not compiled
            return step
        if kind == "train":
            wrapped = _eager_first(_compiled_train_step(model), eager)
        else:
            wrapped = _converting(step)
        setattr(model, f"{kind}_function", wrapped)
        return wrapped

    return make_function


def compile_once(model):
    """Makes `model`'s `jit_compile=True` steps on PyTorch compile once each (see the module
    docstring); returns `model`."""
    if keras.backend.backend() != "torch" or getattr(model, "_compiles_once", False):
        return model
    for kind in ("train", "test", "predict"):
        name = f"make_{kind}_function"
        object.__setattr__(model, name, _patched(model, kind, getattr(model, name)))
    object.__setattr__(model, "_compiles_once", True)
    return model
