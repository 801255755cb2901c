"""The run folder is the run's (`keras_vit.run_folder`): a folder of other files is refused as
`--output-dir`, a second run is refused while one holds the folder, a run file is replaced only
once complete, `--fresh` removes only what a run wrote; models load by name or file, with the
same check for every command; no file that is not a regular one is opened (a FIFO would block)."""

import contextlib
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit import run_folder
from keras_vit.utils import files
from keras_vit.cli import main
from keras_vit.preprocessing import preprocessing
from keras_vit.training import pretrain, train
from tests.support import JIT, this_backends_share
from tests.support.commands import fails

TINY_FLAGS = [
    "--image-size", "8", "--patch-size", "4", "--hidden-dim", "16", "--depth", "1", "--num-heads", "2",
    "--mlp-dim", "16", "--steps", "1", "--batch-size", "32", "--tensorboard", "false", "--verbose", "0",
    "--set", f"jit_compile={JIT}",
]
TINY = dict(image_size=8, patch_size=4, hidden_dim=16, depth=1, num_heads=2, mlp_dim=16, batch_size=32,
            reference_batch_size=32, warmup_steps=1, tensorboard=False, verbose=0, jit_compile=JIT, val_fraction=0.2,
            steps=None, epochs=1)  # 5 steps an epoch
RECIPES = {"train": "digits", "pretrain": "masked_patch_digits"}
FUNCTIONS = {"train": train, "pretrain": pretrain}


def _digits():
    from sklearn.datasets import load_digits

    bunch = load_digits()
    images = (bunch.images[:200] * (255 / 16)).astype("uint8")
    return np.repeat(images[..., None], 3, axis=-1), bunch.target[:200]


def _snapshot(folder):
    """`{relative path: bytes}` of every file under `folder`."""
    found = {}
    for root, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(root, name)
            with open(path, "rb") as handle:
                found[os.path.relpath(path, folder)] = handle.read()
    return found


def _quiet(argv):
    with contextlib.redirect_stdout(io.StringIO()):
        return main([str(a) for a in argv])


@pytest.fixture
def users_folder(tmp_path):
    """A folder of a user's files, some of them named like run files."""
    folder = tmp_path / "mine"
    (folder / "checkpoint").mkdir(parents=True)
    (folder / "notes.txt").write_text("my notes\n")
    (folder / "config.json").write_text(json.dumps({"model_type": "vit", "hidden_size": 768}))
    (folder / "best.keras").write_bytes(b"my model")
    (folder / "checkpoint" / "step-3.weights.h5").write_bytes(b"my weights")
    return folder


@pytest.mark.backend_independent  # the run folder's file logic (plain Python): a training is only its vehicle
@pytest.mark.parametrize("command", ["train", "pretrain"])
def test_a_folder_of_other_files_is_refused_as_output_dir(users_folder, command, capsys):
    before = _snapshot(users_folder)
    for fresh in ([], ["--fresh"]):
        fails([command, "--output-dir", users_folder, *TINY_FLAGS, *fresh], capsys,
              "holds files (best.keras, checkpoint, config.json, ...) but no keras_vit run", "--overwrite-output-dir")
    assert _snapshot(users_folder) == before
    # said explicitly: the run writes there, and what is not a run file stays
    assert _quiet([command, "--output-dir", users_folder, *TINY_FLAGS, "--overwrite-output-dir"]) == 0
    assert (users_folder / "notes.txt").read_text() == "my notes\n"
    assert run_folder.is_run(str(users_folder)) and not (users_folder / run_folder.LOCK).exists()


class SecondRun(keras.callbacks.Callback):
    """Starts the same command in the same folder while the run trains (once)."""

    def __init__(self, argv):
        super().__init__()
        self.argv, self.code, self.err = argv, None, None

    def on_train_batch_end(self, batch, logs=None):
        if self.code is None:
            err = io.StringIO()
            with contextlib.redirect_stderr(err):
                self.code = _quiet(self.argv)
            self.err = err.getvalue()


@pytest.mark.backend_independent  # the run folder's file logic (plain Python): a training is only its vehicle
@pytest.mark.parametrize("command", ["train", "pretrain"])
def test_a_second_run_is_refused_while_one_holds_the_folder(tmp_path, command, capsys):
    run_dir = tmp_path / "run"
    second = SecondRun([command, "--output-dir", run_dir, *TINY_FLAGS])
    FUNCTIONS[command](RECIPES[command], data=_digits(), output_dir=str(run_dir), callbacks=[second], **{**TINY, "steps": 2})
    assert second.code == 2 and second.err.count("\n") == 1 and "Traceback" not in second.err
    assert f"is in use by a run of process {os.getpid()}" in second.err
    assert not (run_dir / run_folder.LOCK).exists()  # released at the end
    state = json.loads((run_dir / "checkpoint" / "state.json").read_text())
    assert state["step"] == 2 and sorted(os.listdir(run_dir / "checkpoint")) == ["state.json", "step-2.weights.h5"]
    # a run of another live process holds it: refused; once that process is gone, its lock is stale
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (run_dir / run_folder.LOCK).write_text(json.dumps(run_folder.signed({"pid": other.pid, "host": socket.gethostname()})))
        fails([command, "--output-dir", run_dir, *TINY_FLAGS], capsys, f"in use by a run of process {other.pid}")
    finally:
        other.kill()
        other.wait()
    result = FUNCTIONS[command](RECIPES[command], data=_digits(), output_dir=str(run_dir), **{**TINY, "steps": 3})
    assert result.resumed_from == 2 and not (run_dir / run_folder.LOCK).exists()


# The files each command writes again when a finished run is continued (its best not set).
REWRITTEN = {
    "train": ["log.csv", "fewshot.csv", "lora.npz", "best.keras", "final.keras", "state.json"],
    "pretrain": ["log.csv", "best.keras", "encoder.keras", "state.json"],
}


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """`{command: run folder}` of a finished one-epoch run (train: with LoRA and few-shot logs)."""
    runs = {}
    for command, function in FUNCTIONS.items():
        run_dir = str(tmp_path_factory.mktemp(command) / "run")
        extra = dict(lora_rank=2, fewshot_every=3) if command == "train" else {}
        function(RECIPES[command], data=_digits(), output_dir=run_dir, **TINY, **extra)
        runs[command] = run_dir
    return runs


@pytest.mark.backend_independent  # the run folder's file logic (plain Python): a training is only its vehicle
@pytest.mark.parametrize("command, name", [(c, n) for c, names in REWRITTEN.items() for n in names])
def test_a_run_file_is_replaced_only_once_complete(finished, tmp_path, monkeypatch, command, name):
    """A kill while `name` is written (here: its rename fails) leaves the earlier file whole."""
    run_dir = str(tmp_path / "run")
    shutil.copytree(finished[command], run_dir)
    state = os.path.join(run_dir, "checkpoint", "state.json")
    with open(state) as handle:
        saved = json.load(handle)
    files.write_json(state, {**saved, "best": None})  # the next epoch's model is the best so far
    target = os.path.join(run_dir, "checkpoint" if name == "state.json" else "", name)
    with open(target, "rb") as handle:
        before = handle.read()
    replace = os.replace

    def killed(source, destination):
        if os.path.basename(destination) == name:
            raise OSError(f"killed while writing {name}")
        replace(source, destination)

    monkeypatch.setattr(os, "replace", killed)
    extra = dict(lora_rank=2, fewshot_every=3) if command == "train" else {}
    with pytest.raises(OSError, match=f"killed while writing {name}"):
        FUNCTIONS[command](RECIPES[command], data=_digits(), output_dir=run_dir, **{**TINY, "epochs": 2}, **extra)
    monkeypatch.setattr(os, "replace", replace)
    with open(target, "rb") as handle:
        assert handle.read() == before
    assert not [n for n in os.listdir(os.path.dirname(target)) if n.startswith(files.TMP_PREFIX)]


@pytest.mark.backend_independent  # the run folder's file logic (plain Python): a training is only its vehicle
def test_fresh_removes_what_the_run_wrote_and_nothing_else(finished, tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(finished["train"], run_dir)
    (run_dir / "notes.txt").write_text("mine\n")
    before = (run_dir / "fewshot.csv").read_text()
    train("digits", data=_digits(), output_dir=str(run_dir), resume=False, **{**TINY, "steps": 1})
    assert sorted(os.listdir(run_dir)) == ["best.keras", "checkpoint", "classes.json", "config.json", "final.keras",
                                           "log.csv", "notes.txt"]  # no earlier lora.npz, fewshot.csv
    assert (run_dir / "notes.txt").read_text() == "mine\n" and before
    assert len((run_dir / "log.csv").read_text().strip().splitlines()) == 2  # a header and this run's epoch


def _alarm(seconds):
    def hung(*_):
        raise TimeoutError("blocked opening a FIFO")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(seconds)
    return previous


@pytest.fixture
def saved_model(tmp_path):
    path = tmp_path / "model.keras"
    keras_vit.VisionTransformer(patch_size=4, hidden_dim=16, depth=1, num_heads=2, mlp_dim=16,
                                classes=2, input_shape=(8, 8, 3)).save(path)
    return path


@pytest.mark.parametrize("command", ["evaluate", "train", "predict", "inspect"])
def test_a_fifo_among_the_inputs_is_refused_without_blocking(tmp_path, saved_model, command, capsys):
    from PIL import Image

    data = tmp_path / "data"
    for label in ("a", "b"):
        (data / label).mkdir(parents=True)
        for k in range(3):
            Image.fromarray(np.full((8, 8, 3), 40 * k, "uint8")).save(data / label / f"{k}.png")
    fifo = data / "b" / "z.png"
    os.mkfifo(fifo)  # opening it for reading blocks until a writer comes
    argv = {
        "evaluate": ["evaluate", saved_model, "--data", data],
        "train": ["train", "--data", data, "--output-dir", tmp_path / "run", *TINY_FLAGS],
        "predict": ["predict", fifo, "--model", saved_model],
        "inspect": ["inspect", fifo, "--model", saved_model, "--out", tmp_path / "out"],
    }[command]
    previous = _alarm(30)
    try:
        fails(argv, capsys, f"{fifo} is not a regular file but a FIFO")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize("command", ["evaluate", "predict", "inspect"])
def test_a_model_file_that_is_a_fifo_is_refused_without_blocking(tmp_path, command, capsys):
    from PIL import Image

    image = tmp_path / "image.png"
    Image.fromarray(np.zeros((8, 8, 3), "uint8")).save(image)
    model = tmp_path / "model.keras"
    os.mkfifo(model)
    argv = {
        "evaluate": ["evaluate", model, "--data", "digits"],
        "predict": ["predict", image, "--model", model],
        "inspect": ["inspect", image, "--model", model, "--out", tmp_path / "out"],
    }[command]
    previous = _alarm(30)
    try:
        fails(argv, capsys, f"{model} is not a regular file but a FIFO")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize("name, size", this_backends_share([("ViTTi16", 32), ("DeiTTi16", 32), ("DINOv2S14", 28)],
                                                         everywhere=[("ViTTi16", 32)]))
def test_inspect_loads_every_model_predict_loads(tmp_path, name, size):
    """One loader (`run_folder.load_model`): a listed model is accepted by both commands."""
    from PIL import Image

    image = tmp_path / "image.png"
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (40, 40, 3), dtype=np.uint8)).save(image)
    out = tmp_path / "out"
    assert _quiet(["inspect", image, "--model", name, "--image-size", size, "--out", out]) == 0
    assert "attention_rollout.png" in os.listdir(out)
    model, names, crop = run_folder.load_model(name, weights=None, input_shape=(size, size, 3))
    assert crop == preprocessing(model).crop_fraction
