"""Shared test set-up: quiet TensorFlow, one JAX compilation cache, a private weights cache, and
no network."""

import atexit
import os
import shutil
import socket
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# Under JAX every new tiny model compiles its functions again, here and in the Python processes
# the tests start (training runs, hosts, commands): one persistent cache for the session and its
# children turns the repeats into cache hits. A new, empty folder each session; set before JAX
# is imported, so that this process reads it too.
JAX_CACHE = tempfile.mkdtemp(prefix="keras_vit_tests_jax_cache_")
atexit.register(shutil.rmtree, JAX_CACHE, ignore_errors=True)
os.environ.update(JAX_COMPILATION_CACHE_DIR=JAX_CACHE, JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
                  JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

BACKEND = keras.backend.backend()
LOOPBACK = ("127.", "::1", "localhost")


@pytest.fixture(autouse=True)
def _isolated(tmp_path_factory, monkeypatch):
    """Each test gets its own `KERAS_VIT_HOME` and may only open loopback connections."""
    monkeypatch.setenv("KERAS_VIT_HOME", str(tmp_path_factory.mktemp("keras_vit_home")))
    real_connect = socket.socket.connect

    def connect(sock, address):
        host = address[0] if isinstance(address, tuple) else str(address)
        if sock.family == socket.AF_UNIX or str(host).startswith(LOOPBACK):
            return real_connect(sock, address)
        raise OSError(f"tests may not use the network (tried to connect to {address})")

    monkeypatch.setattr(socket.socket, "connect", connect)
    keras.utils.set_random_seed(0)
    yield
    keras.config.set_dtype_policy("float32")


@pytest.fixture
def rng():
    return np.random.default_rng(0)
