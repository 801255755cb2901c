"""Precision that means what it says: exact float32 products, TF32 by name, and a bfloat16
model whose token (residual) stream stays float32."""

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.utils import matmul_precision
from keras_vit.layers import ClassToken, Encoder, PositionEmbedding, TransformerBlock
from keras_vit.training import precision
from benchmarks.numpy_vit import reference_params
from tests.support.models import randomize
from benchmarks.numpy_vit import vit_forward

ARCH = dict(patch_size=4, hidden_dim=64, depth=6, num_heads=2, mlp_dim=128, input_shape=(16, 16, 3))


@pytest.fixture
def tf32_default(monkeypatch):
    """The backend as a GPU process starts: TF32 allowed, nothing chosen by the user."""
    matmul_precision._apply("tf32")
    monkeypatch.setattr(matmul_precision, "_chosen", None)
    yield
    matmul_precision._apply("highest")


def test_a_float32_model_makes_products_exact(tf32_default):
    assert matmul_precision.float32_matmul_precision() == "tf32"
    keras_vit.VisionTransformer(**ARCH, classes=3)
    assert matmul_precision.float32_matmul_precision() == "highest"


def test_tf32_by_name_keeps_the_float32_policy(tf32_default):
    assert precision.resolve_precision("tf32") == "tf32"
    assert precision.apply_precision("tf32") == "tf32"
    assert keras.config.dtype_policy().name == "float32"
    keras_vit.VisionTransformer(**ARCH, classes=3)
    assert matmul_precision.float32_matmul_precision() == "tf32"
    assert precision.apply_precision("float32") == "float32"
    assert matmul_precision.float32_matmul_precision() == "highest"
    with pytest.raises(ValueError, match="expected one of"):
        matmul_precision.set_float32_matmul_precision("fast")


def test_mixed_model_leaves_the_backend_setting(tf32_default):
    keras.config.set_dtype_policy("mixed_bfloat16")
    keras_vit.VisionTransformer(**ARCH, classes=3)
    assert matmul_precision.float32_matmul_precision() == "tf32"


def test_token_stream_is_float32_under_mixed_bfloat16(rng):
    keras.config.set_dtype_policy("mixed_bfloat16")
    tokens = rng.standard_normal((2, 4, 8)).astype("float32")
    block = TransformerBlock(num_heads=2, mlp_dim=16)
    out = block(keras.ops.cast(tokens, "bfloat16"))
    assert keras.backend.standardize_dtype(out.dtype) == "float32"
    assert block.attention.compute_dtype == "bfloat16" and block.mlp.compute_dtype == "bfloat16"
    with_cls = ClassToken()(tokens)
    assert keras.backend.standardize_dtype(with_cls.dtype) == "float32"
    grid = keras.ops.zeros((2, 2, 2, 8), "bfloat16")
    embedded = PositionEmbedding((2, 2))(with_cls[:, :5], grid)
    assert keras.backend.standardize_dtype(embedded.dtype) == "float32"
    encoded = Encoder(2, 2, 16)(embedded)  # the final LayerNorm gives the compute dtype
    assert keras.backend.standardize_dtype(encoded.dtype) == "bfloat16"


# Mean relative logit error of mixed_bfloat16 against float64 over the three models below,
# with the bfloat16 token stream of old -> the float32 one: JAX 9.3e-3 -> 7.8e-3, PyTorch
# 1.02e-2 -> 8.1e-3, TensorFlow 1.30e-2 -> 1.11e-2 (Keras' TensorFlow attention rounds the
# logits to bfloat16 before its float32 softmax).
BF16_ERROR_BOUND = {"jax": 8.5e-3, "torch": 9e-3, "tensorflow": 1.2e-2}


def test_bfloat16_logit_error_against_float64(rng):
    errors = []
    for seed in range(3):
        keras.config.set_dtype_policy("float32")
        model = randomize(
            keras_vit.VisionTransformer(**ARCH, classes=10, classifier_activation=None, approximate_gelu=False),
            seed=seed,
            scale=0.1,
        )
        images = np.random.default_rng(seed).uniform(-1, 1, (8, 16, 16, 3)).astype("float32")
        want, _ = vit_forward(images, reference_params(model, 2), 4, 2, approximate_gelu=False)
        keras.config.set_dtype_policy("mixed_bfloat16")
        bf16 = keras_vit.VisionTransformer(**ARCH, classes=10, classifier_activation=None, approximate_gelu=False)
        bf16.set_weights(model.get_weights())
        got = np.asarray(bf16.predict(images, verbose=0), np.float64)
        errors.append(np.linalg.norm(got - want) / np.linalg.norm(want))
    assert np.mean(errors) < BF16_ERROR_BOUND[keras.backend.backend()], errors
