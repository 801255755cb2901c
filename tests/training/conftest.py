"""The training tests' set-up: a JAX compilation cache for the tiny models they all compile."""

import keras
import pytest


@pytest.fixture(scope="module", autouse=True)
def jax_compilation_cache(tmp_path_factory):
    """Under JAX, every `train()` compiles its tiny model again (a new model, new functions);
    JAX's persistent cache (one folder for the session) turns the repeats into cache hits."""
    if keras.backend.backend() != "jax":
        yield
        return
    import jax

    options = {
        "jax_compilation_cache_dir": str(tmp_path_factory.getbasetemp() / "jax_compilation_cache"),
        "jax_persistent_cache_min_compile_time_secs": 0.0,
        "jax_persistent_cache_min_entry_size_bytes": 0,
    }
    previous = {name: getattr(jax.config, name) for name in options}
    for name, value in options.items():
        jax.config.update(name, value)
    yield
    for name, value in previous.items():
        jax.config.update(name, value)
