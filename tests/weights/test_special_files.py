"""Nothing hangs or spins on a crafted or special file (issue 42, class 6): the download cache's
file goes through the one regular-file check (a FIFO, a symbolic link loop, a link to /dev/zero;
the shards an index names: tests/weights/test_integrity.py), and a file or shard index declaring
a huge number of tensors is refused at its declared count."""

import contextlib
import json
import os
import signal

import numpy as np
import pytest

from keras_vit.utils.limits import MAX_TENSORS
from keras_vit.weights import registry
from keras_vit.weights.download import fetch
from keras_vit.weights.reading import read_checkpoint
from keras_vit.weights.registry import WeightsEntry

pytestmark = pytest.mark.backend_independent


@contextlib.contextmanager
def _within(seconds):
    def hung(*_):
        raise TimeoutError("blocked on a special file")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _special(path, kind):
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "link loop":
        os.symlink(os.path.basename(path), path)
    elif kind == "link to /dev/zero":
        os.symlink("/dev/zero", path)
    else:
        os.mkdir(path)


KINDS = ["fifo", "link loop", "link to /dev/zero", "folder"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_special_file_in_the_download_cache_is_refused_without_blocking(kind):
    entry = WeightsEntry("ViTTest", "tiny_test", 32, 5, None, "npz", "http://127.0.0.1:9/tiny.npz",
                         sha256="0" * 64, size=1000)
    target = registry.cache_path(entry)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    _special(target, kind)
    with _within(5), pytest.raises(ValueError) as refused:
        fetch(entry)
    message = str(refused.value)
    assert "\n" not in message and "refusing to read it as a cached checkpoint" in message and "Delete" in message
    assert os.path.lexists(target)  # the user's entry is left there


def test_a_file_declaring_more_tensors_than_the_bound_is_refused_at_its_count(tmp_path):
    from safetensors.numpy import save_file

    count = MAX_TENSORS + 1
    save_file({f"t{i}": np.zeros((0,), np.float32) for i in range(count)}, str(tmp_path / "many.safetensors"))
    with _within(20), pytest.raises(ValueError, match=f"declares {count} tensors; accepted: up to {MAX_TENSORS}"):
        read_checkpoint(str(tmp_path / "many.safetensors"))
    folder = tmp_path / "sharded"
    folder.mkdir()
    weight_map = {f"t{i}": "shard.safetensors" for i in range(count)}
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    save_file({"t0": np.zeros((1,), np.float32)}, str(folder / "shard.safetensors"))
    with _within(20), pytest.raises(ValueError, match=f"declares {count} tensors"):
        read_checkpoint(str(folder))
