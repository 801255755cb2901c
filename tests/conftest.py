"""Shared test set-up: quiet TensorFlow, one JAX compilation cache and shorter XLA compiles, a private
weights cache, no network, and the run-once rule of the tests marked `backend_independent`."""

import atexit
import gc
import os
import shutil
import socket
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# Under JAX every new tiny model compiles its functions again, here and in the Python processes
# the tests start (training runs, hosts, commands): one persistent cache for the session and its
# children turns the repeats into cache hits. The folder `tests/run_backends.py` gives all its
# pytest processes (under any backend: their children may run JAX), else a new, empty one; set
# before JAX is imported, so that this process reads it too.
if not os.environ.get("JAX_COMPILATION_CACHE_DIR"):
    os.environ["JAX_COMPILATION_CACHE_DIR"] = tempfile.mkdtemp(prefix="keras_vit_tests_jax_cache_")
    atexit.register(shutil.rmtree, os.environ["JAX_COMPILATION_CACHE_DIR"], ignore_errors=True)
os.environ.update(JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0", JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0")
# Half of a JAX test's time is XLA compiling tiny programs, most of it in LLVM's optimisation passes:
# its -O1 compiles them 13 % faster than the default -O3, to the same numbers bit for bit
# (tests/test_suite_settings.py checks). For this process and the ones it starts.
if "--xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} --xla_backend_optimization_level=1".strip()

import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

BACKEND = keras.backend.backend()
LOOPBACK = ("127.", "::1", "localhost")
# CI runs the suite once per backend. Two marks deselect (not skip) a test on some backends,
# where it would run no code of theirs that another backend's run does not:
# - `backend_independent`: code whose result cannot depend on the Keras backend (files and
#   containers, checkpoint conversion without Keras, parsing of the command line and the docs,
#   NumPy and tf.data code, the import graph, benchmark arithmetic): it runs under
#   INDEPENDENT_BACKEND only, PyTorch, the fastest on CPU, so the three runs end closer together;
# - `backends("tensorflow", "torch")`: runs under the backends named, e.g. an export that the
#   other backends hand whole to a process of a named one.
# The numerics of each backend are never left out: each code path keeps a case on each backend.
INDEPENDENT_BACKEND = "torch"


def runs_here(item):
    """Whether this backend's run keeps `item` (the marks above)."""
    if item.get_closest_marker("backend_independent"):
        return BACKEND == INDEPENDENT_BACKEND
    only = item.get_closest_marker("backends")
    return only is None or BACKEND in only.args


def pytest_collection_modifyitems(config, items):
    elsewhere = [item for item in items if not runs_here(item)]
    if elsewhere:
        config.hook.pytest_deselected(items=elsewhere)
        items[:] = [item for item in items if runs_here(item)]


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


def _freeze():
    """Collects, then moves what is left into the permanent generation (`gc.freeze`)."""
    gc.collect()
    gc.freeze()


# Python's full garbage collections scan every object alive, and Keras starts one at each variable
# it deletes (`model.quantize`). Most of what is alive stays so to the end: the imported modules
# (Keras, the backends, the tests) and the backends' caches of traced and compiled programs. Frozen
# after collection and after each test module (its module-scoped fixtures gone), they are not
# scanned again, only what the next tests make.
def pytest_collection_finish(session):
    _freeze()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    yield
    if nextitem is None or nextitem.module is not item.module:
        _freeze()
