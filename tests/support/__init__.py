"""What the tests share: the backend under test here, model helpers (`models`), checkpoint files
in the real formats (`checkpoints`), the benchmarks' import path (`benchmarks`) and the
distributed-training worker script (`worker.py`). Test files import from here, never from
each other or from `conftest`."""

import keras

BACKEND = keras.backend.backend()
BACKENDS = ("jax", "tensorflow", "torch")  # the suite runs once under each (tests/run_backends.py)
# `jit_compile` of the tests' tiny training runs: compiled on JAX (its eager steps dispatch op by op and
# take longer than compiling them), eager elsewhere (compiling costs more than a few steps take).
JIT = BACKEND == "jax"


def one_of_the_others(cases):
    """`cases` as this backend checks them: the first (e.g. a checkpoint's native size) and one of
    the others, a different one under each backend in turn, so that each backend runs both code
    paths (native and resized) and the suite's three runs check every case."""
    others = list(cases[1:])
    return [cases[0], *others[BACKENDS.index(BACKEND) % len(others):][:1]] if others else list(cases)


def this_backends_share(cases, everywhere=()):
    """The cases of `cases` checked under this backend: those in `everywhere` under each, every
    third of the others under each in turn (the suite's three runs check every case once)."""
    others = [case for case in cases if case not in everywhere]
    mine = set(others[BACKENDS.index(BACKEND)::len(BACKENDS)])
    return [case for case in cases if case in everywhere or case in mine]
