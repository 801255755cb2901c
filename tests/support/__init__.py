"""What the tests share: the backend under test here, model helpers (`models`), checkpoint files
in the real formats (`checkpoints`), the benchmarks' import path (`benchmarks`) and the
distributed-training worker script (`worker.py`). Test files import from here, never from
each other or from `conftest`."""

import keras

BACKEND = keras.backend.backend()
