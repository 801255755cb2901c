"""A run's own files are never lost, a user's never touched (issue 42, class 1): nothing in a
checkpoint folder is deleted before the state to keep is proven whole; only the lock and
heartbeats keras_vit marked count as its own; a disk that fills during a save ends the command
in one line, exit 75, with the state to resume from intact."""

import errno
import json
import os
import shutil
import socket
import subprocess
import sys

import keras
import pytest

from keras_vit import run_folder
from keras_vit.utils import files
from tests.support import JIT, this_backends_share
from tests.support.commands import run_quietly, snapshot

FLAGS = [
    "--image-size", "8", "--patch-size", "4", "--hidden-dim", "16", "--depth", "1", "--num-heads", "2",
    "--mlp-dim", "16", "--batch-size", "32", "--tensorboard", "false", "--verbose", "0",
    "--set", f"jit_compile={JIT}",
]






@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A run folder of 5 steps (one epoch): `checkpoint/step-5.weights.h5` and `best.keras`."""
    run_dir = tmp_path_factory.mktemp("finished") / "run"
    code, err = run_quietly(["train", "--output-dir", run_dir, *FLAGS, "--steps", "5"])
    assert code == 0, err
    return run_dir


def _copy(finished, tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(finished, run_dir)
    return run_dir


# How state.json's weights file can fail to be a whole one.
DAMAGED = {
    "missing": None,
    "truncated": lambda whole: whole[: len(whole) // 2],
    "not HDF5": lambda whole: b"not a weights file" * 100,
    "empty": lambda whole: b"",
}


@pytest.mark.backend_independent  # refused (or written) before any backend-specific step
@pytest.mark.parametrize("damage", DAMAGED)
def test_a_state_naming_no_whole_weights_file_deletes_nothing(finished, tmp_path, damage):
    run_dir = _copy(finished, tmp_path)
    checkpoint = run_dir / "checkpoint"
    state = json.loads((checkpoint / "state.json").read_text())
    whole = (checkpoint / state["weights"]).read_bytes()
    if DAMAGED[damage]:
        (checkpoint / "step-9.weights.h5").write_bytes(DAMAGED[damage](whole))
    (checkpoint / "state.json").write_text(json.dumps({**state, "step": 9, "weights": "step-9.weights.h5"}))
    before = snapshot(run_dir)
    code, err = run_quietly(["train", "--output-dir", run_dir, *FLAGS, "--steps", "12"])
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert snapshot(run_dir) == before  # the only whole checkpoint (step 5) kept
    assert "names step-9.weights.h5" in err and "step-5.weights.h5" in err and "Nothing was deleted" in err, err
    # said to start over: it does
    assert run_quietly(["train", "--output-dir", run_dir, *FLAGS, "--steps", "1", "--fresh"])[0] == 0
    assert sorted(os.listdir(checkpoint)) == ["state.json", "step-1.weights.h5"]


def _lock(pid, host=None):
    return {"pid": pid, "host": host or socket.gethostname()}


# A user's entries named like keras_vit's: (path, content: bytes, or a dict of a folder's files).
USERS = {
    "lock file": ("run.lock", b"my lock\n"),
    "lock as keras_vit's, unmarked": ("run.lock", json.dumps(_lock(2**22 + 1)).encode()),
    "lock folder": ("run.lock", {"notes.txt": b"mine"}),
    "hosts file": ("hosts", b"127.0.0.1 localhost\n"),
    "hosts folder": ("hosts", {"notes.txt": b"mine"}),
    "hosts heartbeat, unmarked": ("hosts", {"host-0.json": json.dumps({"index": 0}).encode()}),
}


def _make(folder, name, content):
    if isinstance(content, dict):
        (folder / name).mkdir()
        for inner, data in content.items():
            (folder / name / inner).write_bytes(data)
    else:
        (folder / name).write_bytes(content)


@pytest.mark.backend_independent  # refused (or written) before any backend-specific step
@pytest.mark.parametrize("entry", USERS)
def test_a_users_lock_or_hosts_entry_is_never_removed_nor_taken_for_arun_quietly(tmp_path, entry):
    folder = tmp_path / "mine"
    folder.mkdir()
    _make(folder, *USERS[entry])
    before = snapshot(folder)
    for extra in ([], ["--fresh"], ["--overwrite-output-dir"]):
        code, err = run_quietly(["train", "--output-dir", folder, *FLAGS, "--steps", "1", *extra])
        if USERS[entry][0] == "hosts" and extra == ["--overwrite-output-dir"]:  # told to: the run writes beside it
            assert code == 0, err
            assert snapshot(folder)["hosts"] is None or snapshot(folder)["hosts"] == before["hosts"]
            assert {k: v for k, v in snapshot(folder).items() if k.startswith("hosts")} == before
            continue
        assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
        assert snapshot(folder) == before, (extra, err)


@pytest.mark.backend_independent  # refused (or written) before any backend-specific step
@pytest.mark.parametrize("entry", [name for name in USERS if USERS[name][0] == "run.lock"])
def test_a_users_lock_in_a_run_folder_is_refused_and_kept(finished, tmp_path, entry):
    run_dir = _copy(finished, tmp_path)
    _make(run_dir, *USERS[entry])
    before = snapshot(run_dir)
    code, err = run_quietly(["train", "--output-dir", run_dir, *FLAGS, "--steps", "6"])
    assert code == 2 and err.count("\n") == 1 and "is not a lock keras_vit wrote" in err, err
    assert snapshot(run_dir) == before


@pytest.mark.backend_independent  # refused (or written) before any backend-specific step
def test_keras_vits_own_stale_lock_and_heartbeats_are_its_own(tmp_path):
    """A folder holding only what a killed keras_vit run left (its marked lock, heartbeats) is
    a run's: the stale lock is taken over, the heartbeats stay."""
    folder = tmp_path / "run"
    (folder / "hosts").mkdir(parents=True)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (folder / "run.lock").write_text(json.dumps(run_folder.signed(_lock(dead.pid))))
    beat = json.dumps(run_folder.signed({"index": 1, "beat": 3}))
    (folder / "hosts" / "host-1.json").write_text(beat)
    code, err = run_quietly(["train", "--output-dir", folder, *FLAGS, "--steps", "1"])
    assert code == 0, err
    assert not (folder / "run.lock").exists() and (folder / "hosts" / "host-1.json").read_text() == beat


def _no_space(*_, **__):
    raise OSError(errno.ENOSPC, "No space left on device")


def _writes_then_fails(method):
    """`method` that writes part of its file, then finds the disk full."""
    def write(self, path, *args, **kwargs):
        with open(path, "wb") as handle:
            handle.write(b"\x89HDF\r\n\x1a\n partial")
        _no_space()
    return write


class _Full:
    f_bavail, f_frsize = 1, 4096


# Where a disk can fill while a run saves: each writer of the checkpoint, and a disk too full to start.
FULL = {
    "step weights": lambda mp: mp.setattr(keras.Model, "save_weights", _writes_then_fails(keras.Model.save_weights)),
    "best model": lambda mp: mp.setattr(keras.Model, "save", _writes_then_fails(keras.Model.save)),
    "state.json": lambda mp: mp.setattr(
        files, "write_text",
        (lambda real: lambda path, text: _no_space() if path.endswith("state.json") else real(path, text))(files.write_text)),
    "too little room": lambda mp: mp.setattr(os, "statvfs", lambda path: _Full()),
}


@pytest.mark.parametrize("where", this_backends_share(list(FULL), everywhere=("step weights",)))  # the same handling
def test_a_full_disk_during_a_save_exits_75_with_the_checkpoint_intact(finished, tmp_path, monkeypatch, where):
    run_dir = _copy(finished, tmp_path)
    state = run_dir / "checkpoint" / "state.json"
    state.write_text(json.dumps({**json.loads(state.read_text()), "best": None}))  # the next epoch's is the best
    kept = {k: v for k, v in snapshot(run_dir).items() if k in ("checkpoint/state.json", "checkpoint/step-5.weights.h5")}
    FULL[where](monkeypatch)
    code, err = run_quietly(["train", "--output-dir", run_dir, *FLAGS, "--steps", "10"])
    monkeypatch.undo()
    assert code == 75 and err.count("\n") == 1 and "Traceback" not in err, err
    assert "space" in err and "run the same command again" in err, err
    after = snapshot(run_dir)
    assert {k: v for k, v in after.items() if k in kept} == kept
    assert not [name for name in after if os.path.basename(name).startswith(files.TMP_PREFIX)]
    assert not (run_dir / "run.lock").exists()
    # once there is room, the same command resumes from the kept state
    code, err = run_quietly(["train", "--output-dir", run_dir, *FLAGS, "--steps", "10"])
    assert code == 0, err
    assert json.loads(state.read_text())["step"] == 10
