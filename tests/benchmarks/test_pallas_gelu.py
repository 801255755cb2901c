"""benchmarks/pallas_gelu.py: the fused dense + bias + exact GELU kernel, run by Pallas'
interpreter on the CPU, against the plain Dense + exact GELU and a float64 NumPy reference."""

import numpy as np
import pytest
from scipy.special import erf

from tests.support import BACKEND
from tests.support.benchmarks import BENCHMARKS  # noqa: F401  (puts benchmarks/ on sys.path)

pytestmark = pytest.mark.skipif(BACKEND != "jax", reason="a Pallas (JAX) kernel")


def _inputs(rows=10, features=32, units=64, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((2, rows // 2, features))
    kernel = rng.standard_normal((features, units)) / np.sqrt(features)
    return x, kernel, rng.standard_normal(units)


def _reference(x, kernel, bias):
    h = x @ kernel + bias
    return 0.5 * h * (1 + erf(h / np.sqrt(2)))


def test_erf_is_exact_to_float32():
    import pallas_gelu

    x = np.linspace(-6, 6, 10_001)
    got = np.asarray(pallas_gelu.erf(np.float32(x)))
    assert np.max(np.abs(got - erf(x))) < 5e-7  # XLA's own float32 erf: 2.8e-7 here


def test_float32_matches_dense_and_exact_gelu():
    import jax
    import jax.numpy as jnp

    import pallas_gelu

    x, kernel, bias = (jnp.asarray(a, jnp.float32) for a in _inputs())
    got = pallas_gelu.dense_gelu(x, kernel, bias, interpret=True)
    plain = jax.nn.gelu(jnp.dot(x, kernel, precision="highest") + bias, approximate=False)
    np.testing.assert_allclose(got, plain, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got, _reference(*_inputs()), rtol=1e-5, atol=1e-6)


def test_bfloat16_within_bfloat16_rounding():
    """One rounding of the float32 result to bfloat16 (the plain path rounds h, then GELU)."""
    import jax
    import jax.numpy as jnp

    import pallas_gelu

    arrays = _inputs(rows=256, features=128, units=256, seed=1)
    x, kernel, bias = (jnp.asarray(a, jnp.bfloat16) for a in arrays)
    want = _reference(*(np.asarray(a, np.float64) for a in (x, kernel, bias)))
    got = np.asarray(pallas_gelu.dense_gelu(x, kernel, bias, interpret=True), np.float64)
    plain = np.asarray(jax.nn.gelu(jnp.dot(x, kernel) + bias, approximate=False), np.float64)
    spacing = 2.0 ** (np.floor(np.log2(np.abs(want))) - 7)  # between neighbouring bfloat16 values
    assert np.all(np.abs(got - want) <= 0.5 * spacing + 1e-6)  # rounded once, to the nearest
    assert np.linalg.norm(got - want) <= np.linalg.norm(plain - want)


def test_gradients_match_dense_and_exact_gelu():
    import jax
    import jax.numpy as jnp

    import pallas_gelu

    x, kernel, bias = (jnp.asarray(a, jnp.float32) for a in _inputs(seed=2))
    weights = jnp.asarray(np.random.default_rng(3).standard_normal((2, 5, 64)), jnp.float32)

    def loss(fn):
        return lambda *args: jnp.sum(weights * fn(*args))

    fused = jax.grad(loss(lambda *a: pallas_gelu.dense_gelu(*a, interpret=True)), argnums=(0, 1, 2))(x, kernel, bias)
    plain = jax.grad(loss(lambda x, k, b: jax.nn.gelu(jnp.dot(x, k, precision="highest") + b, approximate=False)),
                     argnums=(0, 1, 2))(x, kernel, bias)
    for got, want in zip(fused, plain):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_plain_fallback_off_the_gpu_and_triton_lowering_at_b16_shapes():
    import jax
    import jax.numpy as jnp

    import pallas_gelu

    x, kernel, bias = (jnp.asarray(a, jnp.float32) for a in _inputs())
    np.testing.assert_array_equal(pallas_gelu.dense_gelu(x, kernel, bias),
                                  jax.nn.gelu(jnp.dot(x, kernel) + bias, approximate=False))
    # the GPU path (Triton) lowers, forward and backward, at ViT-B/16's MLP shapes (no GPU needed)
    shapes = (jax.ShapeDtypeStruct((256, 197, 768), jnp.bfloat16), jax.ShapeDtypeStruct((768, 3072), jnp.bfloat16),
              jax.ShapeDtypeStruct((3072,), jnp.bfloat16))
    step = jax.jit(jax.grad(lambda *a: pallas_gelu._dense_gelu(*a, False).astype(jnp.float32).sum(), argnums=(0, 1, 2)))
    text = step.trace(*shapes).lower(lowering_platforms=("cuda",)).as_text()
    assert "dense_bias_gelu" in text


def test_jax_gpu_profile_variant_predicts_and_trains_as_the_shipped_model():
    """The `Pallas dense+GELU` variant swaps each MLP's first Dense + GELU for the kernel: the
    same logits and the same weights after a training step, float32."""
    import keras

    import jax_gpu_profile
    import keras_vit

    x = np.random.default_rng(4).uniform(-1, 1, (2, 8, 8, 3)).astype("float32")
    y = np.array([0, 2])
    results = []
    for context in (jax_gpu_profile.contextlib.nullcontext, jax_gpu_profile.pallas_dense_gelu):
        with context():
            keras.utils.set_random_seed(0)
            model = keras_vit.VisionTransformer(4, 16, 2, 2, 32, input_shape=(8, 8, 3), classes=3,
                                                approximate_gelu=False, classifier_activation=None)
            model.compile(optimizer=keras.optimizers.SGD(0.5),
                          loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
            logits = model.predict_on_batch(x)
            model.train_on_batch(x, y)
            results.append((logits, model.get_weights()))
    np.testing.assert_allclose(results[1][0], results[0][0], rtol=1e-5, atol=1e-6)
    for got, want in zip(results[1][1], results[0][1]):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
