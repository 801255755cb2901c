"""keras_vit.utils.files: atomic writes with normal permissions, and cleaning up after a kill."""

import os
import subprocess
import sys

import pytest

from keras_vit.utils import files

pytestmark = pytest.mark.backend_independent  # file writing: runs under one backend (tests/conftest.py)


@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    yield
    os.umask(old)


def test_file_written_atomically_with_normal_permissions(tmp_path, umask_022):
    target = tmp_path / "sub" / "model.weights.h5"
    with files.atomic_path(target) as tmp:
        assert tmp.endswith(".model.weights.h5") and not os.path.exists(target)
        with open(tmp, "w") as handle:
            handle.write("new")
        os.chmod(tmp, 0o600)  # as tempfile.mkstemp would leave it
    assert target.read_text() == "new"
    assert oct(os.stat(target).st_mode & 0o777) == oct(0o644)
    assert os.listdir(target.parent) == ["model.weights.h5"]


def test_failed_write_leaves_target_and_folder_untouched(tmp_path):
    target = tmp_path / "out.npz"
    target.write_text("old")
    with pytest.raises(RuntimeError):
        with files.atomic_path(target) as tmp:
            with open(tmp, "w") as handle:
                handle.write("half")
            raise RuntimeError("killed")
    assert target.read_text() == "old"
    assert os.listdir(tmp_path) == ["out.npz"]


def test_folder_replaced_only_when_complete(tmp_path, umask_022):
    target = tmp_path / "export"
    target.mkdir()
    (target / "old.txt").write_text("old")
    with files.atomic_path(target) as tmp:
        os.makedirs(os.path.join(tmp, "variables"))
        with open(os.path.join(tmp, "variables", "data"), "w") as handle:
            handle.write("new")
    assert sorted(os.listdir(target)) == ["variables"]
    assert oct(os.stat(target / "variables" / "data").st_mode & 0o777) == oct(0o644)
    assert oct(os.stat(target).st_mode & 0o777) == oct(0o755)
    assert os.listdir(tmp_path) == ["export"]


def test_remove_stale_deletes_only_dead_processes_leftovers(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(dead.stdout)
    stale_file = tmp_path / f"{files.TMP_PREFIX}{dead_pid}-abcd1234.step-3.weights.h5"
    stale_dir = tmp_path / f"{files.TMP_PREFIX}{dead_pid}-abcd1234.export"
    live = tmp_path / f"{files.TMP_PREFIX}{os.getppid()}-abcd1234.step-4.weights.h5"
    mine = files.temporary_name(tmp_path / "x.keras")
    user = tmp_path / ".tmp-1-user-file"
    for path in (stale_file, live, mine, user):
        open(path, "w").close()
    (stale_dir / "variables").mkdir(parents=True)
    removed = files.remove_stale(tmp_path)
    assert sorted(removed) == sorted([stale_file.name, stale_dir.name])
    assert sorted(os.listdir(tmp_path)) == sorted([live.name, os.path.basename(mine), user.name])
