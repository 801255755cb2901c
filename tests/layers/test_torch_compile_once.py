"""`jit_compile=True` on PyTorch compiles each step function once, warm-up included
(`keras_vit.utils.torch_compile`)."""

import functools

import keras
import numpy as np
import pytest

import keras_vit
from tests.support import BACKEND

pytestmark = pytest.mark.skipif(BACKEND != "torch", reason="jit_compile=True means torch.compile only on PyTorch")


@pytest.fixture
def no_recompiles(monkeypatch):
    """Dynamo's frame counters from a clean cache, with the "eager" compiler backend (the
    guards and recompiles are dynamo's, without code generation) and any recompile of a
    function an error (limit 1)."""
    import torch
    from torch._dynamo.utils import counters

    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend="eager"))
    torch._dynamo.reset()
    counters.clear()
    with torch._dynamo.config.patch(recompile_limit=1, fail_on_recompile_limit_hit=True):
        yield counters
    torch._dynamo.reset()


def _tiny(**compile_args):
    keras.utils.set_random_seed(0)
    model = keras_vit.VisionTransformer(
        patch_size=4, hidden_dim=16, depth=2, num_heads=2, mlp_dim=32, input_shape=(8, 8, 3), classes=3
    )
    model.compile(optimizer=keras.optimizers.AdamW(), loss="sparse_categorical_crossentropy", **compile_args)
    return model


def test_numpy_batches_warm_up_without_recompiles(no_recompiles):
    model = _tiny(jit_compile=True)
    x = np.random.default_rng(0).uniform(size=(4, 8, 8, 3)).astype("float32")
    y = np.array([0, 1, 2, 0])
    for _ in range(3):  # train and predict interleaved: both grad modes, first steps included
        model.train_on_batch(x, y)
        model.predict_on_batch(x)
    model.test_on_batch(x, y)
    # train: the step up to backward() and the rest; predict; test: one frame each plus
    # train_step's own frame at the backward() graph break
    assert no_recompiles["frames"]["total"] <= 6, dict(no_recompiles["frames"])


def test_first_eager_step_trains_as_compiled(no_recompiles):
    x = np.random.default_rng(1).uniform(size=(4, 8, 8, 3)).astype("float32")
    y = np.array([2, 1, 0, 0])
    compiled, plain = _tiny(jit_compile=True), _tiny(jit_compile=False)
    for _ in range(3):
        losses = [compiled.train_on_batch(x, y), plain.train_on_batch(x, y)]
    np.testing.assert_allclose(losses[0], losses[1], rtol=1e-5)
    for a, b in zip(compiled.weights, plain.weights):
        np.testing.assert_allclose(keras.ops.convert_to_numpy(a), keras.ops.convert_to_numpy(b), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(compiled.predict_on_batch(x), plain.predict_on_batch(x), rtol=1e-5, atol=1e-6)


@pytest.fixture
def dynamo_traces():
    """The frames dynamo traces (its "start tracing" log lines), in order: a graph break
    makes it trace a frame again (and, inside a called function, the caller too)."""
    import logging

    import torch

    traces = []

    class Handler(logging.Handler):
        def emit(self, record):
            message = record.getMessage()
            if "torchdynamo start tracing" in message:
                traces.append(message.split("torchdynamo start tracing ")[1].split()[0])

    handler = Handler()
    logger = logging.getLogger("torch._dynamo")
    torch._logging.set_logs(dynamo=logging.INFO)
    logger.addHandler(handler)
    yield traces
    logger.removeHandler(handler)
    torch._logging.set_logs()


def test_training_forward_pass_is_traced_twice_not_three_times(no_recompiles, dynamo_traces):
    """`fit`: one trace of `train_step` up to its `backward()` break and its restart, then the
    resume after the break; Keras' `one_step_on_data` around it used to cost a third trace."""
    model = _tiny(jit_compile=True)
    x = np.random.default_rng(0).uniform(size=(8, 8, 8, 3)).astype("float32")
    y = np.array([0, 1, 2, 0, 1, 2, 0, 1])
    model.fit(x, y, batch_size=4, epochs=2, verbose=0)
    assert len(dynamo_traces) == 3, dynamo_traces
    assert dynamo_traces[0] == dynamo_traces[1] == "train_step", dynamo_traces
    assert dynamo_traces[2].startswith("torch_dynamo_resume_in_train_step"), dynamo_traces
