"""Shared test set-up: quiet TensorFlow, a private weights cache, and no network."""

import os
import socket

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

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
