"""`jit_compile=True` on PyTorch: dynamo compiles a keras_vit model's steps once, then reuses them."""

import functools

import keras
import numpy as np
import pytest

import keras_vit
from tests.support import BACKEND

pytestmark = pytest.mark.skipif(BACKEND != "torch", reason="jit_compile=True means torch.compile only on PyTorch")

STEPS = 3


@pytest.fixture
def dynamo(monkeypatch):
    """Dynamo's counters from a clean cache, with the "eager" compiler backend (Keras asks for
    inductor; the guards, graph breaks and recompiles are dynamo's and the same, without the
    code generation) and a recompile-limit hit turned into an error."""
    import torch
    from torch._dynamo.utils import counters

    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend="eager"))
    torch._dynamo.reset()
    counters.clear()
    with torch._dynamo.config.patch(fail_on_recompile_limit_hit=True):
        yield counters
    torch._dynamo.reset()


def test_compiled_steps_do_not_recompile(dynamo):
    import torch

    model = keras_vit.VisionTransformer(
        patch_size=4, hidden_dim=16, depth=2, num_heads=2, mlp_dim=32, input_shape=(8, 8, 3), classes=3
    )
    model.compile(optimizer="adamw", loss="sparse_categorical_crossentropy", jit_compile=True)
    x, y = torch.rand(4, 8, 8, 3), torch.tensor([0, 1, 2, 0])
    for _ in range(2):  # warm-up: both grad modes, twice
        model.predict_on_batch(x)
        model.train_on_batch(x, y)
    warm = dynamo["frames"]["total"]
    for _ in range(STEPS):
        loss = model.train_on_batch(x, y)
        probs = model.predict_on_batch(x)
    assert dynamo["frames"]["total"] == warm, "a step after warm-up was compiled again"
    assert warm <= 16, f"{warm} frames compiled: graph breaks inside the model"
    assert np.isfinite(loss) and probs.shape == (4, 3)
    np.testing.assert_allclose(probs, keras.ops.convert_to_numpy(model(x, training=False)), rtol=1e-5, atol=1e-6)
