"""Atomic file writes: write to a temporary name in the same folder, rename when complete."""

import contextlib
import os
import tempfile


@contextlib.contextmanager
def atomic_file(path, suffix=".part"):
    """Yields a temporary path (ending in `suffix`) next to `path`; it becomes `path` only if
    the block succeeds, and is removed otherwise. Nothing half-written is visible under `path`."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(path)}.", suffix=suffix)
    os.close(fd)
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
