"""Every `keras-vit` line of the shell blocks of README.md and docs/ runs (not only parses), in
process, on tiny models and data: a broken documented command fails here.

Each line runs in a folder of its own holding what the docs' lines refer to: `cat.jpg`,
`dog.png`, a `path/to/folder` of class folders, a `path/to/shapes` dense folder (images and masks) with its
run `runs/shapes`, a tiny random `SiglipModel` folder with a
Gemma tokenizer in place of the downloaded `siglip2-base-patch16-224`, and `runs/digits/best.keras` /
`runs/masked_patch_digits/encoder.keras` made by the docs' own `keras-vit train` and
`keras-vit pretrain` (with the fast settings below). What is substituted, and why:

- `train` / `pretrain` get `FAST` appended (`--set` overrides, the last word: a 1-block ViT of
  width 16 on 8 px images, 2 steps), and the docs' values otherwise;
- `inspect` of a named variant gets `--image-size 32` (ViT-B/16 at 32 px);
- a named download (`--weights imagenet`, `predict`'s default ViT-B/16 ImageNet weights) is
  replaced by a local model: named weights are downloads (no network in tests), fetched and
  checked in tests/weights/test_download.py;
- lines that need the network for their data or weights (`--data cifar10 / imagenet2012`, the
  `finetune` / `scratch` recipes, `convert` of a named checkpoint), several hosts or processes (a launcher or environment set-up
  before `keras-vit`) are skipped with that reason.

They run under one backend only (`backend_independent`, tests/conftest.py): the command line (argument handling, file paths, the code each
command calls) is the same on every backend, whose numbers the command tests check
(tests/training/test_commands.py, tests/cli); this keeps the run within about 2 minutes.
"""

import os
import re
import shlex
import shutil

import numpy as np
import pytest
from PIL import Image

from keras_vit.cli import main
from keras_vit.variants import list_models
from keras_vit.weights import registry
from tests.support.dense_data import write_shapes
from tests.support.docs import PAGES, blocks
from tests.support.text import siglip_folder

pytestmark = pytest.mark.backend_independent

FAST = [f"--set={s}" for s in (
    "model=custom", "patch_size=2", "hidden_dim=16", "depth=1", "num_heads=2", "mlp_dim=32", "image_size=8",
    "steps=2", "warmup_steps=1", "batch_size=32", "tensorboard=false", "verbose=0",
)]
NEEDS_NETWORK = re.compile(r"--data (cifar10|imagenet2012)|--recipe (finetune|scratch)\b")
LOCAL_MODEL = "runs/digits/best.keras"


def command_lines():
    """(page, needs, line) of each `keras-vit` line of a shell block, continued lines joined."""
    for page in PAGES:
        for needs, code in blocks(page, "bash"):
            for line in code.replace("\\\n", " ").splitlines():
                line = line.split(" #")[0].strip()
                if any(w.endswith("keras-vit") for w in line.split()) and not line.startswith("#"):
                    yield page.name, needs, line


def _skip_reason(needs, words):
    if needs:
        return f"needs {needs}"
    if words[0] != "keras-vit":
        return "runs under a launcher or an environment set up for several hosts / processes"
    if NEEDS_NETWORK.search(" ".join(words)) or words[1] == "convert" and registry.is_named(words[2]):
        return "needs the network (a data set or pretrained weights to download)"
    return None


def prepared(words):
    """The arguments that run `words` (a `keras-vit ...` line) on the tiny set-up (module docstring)."""
    args = list(words[1:])
    command = args[0]
    if "--weights" in args:
        value = args[args.index("--weights") + 1]
        if not os.path.exists(value):  # a named checkpoint: a download
            del args[args.index("--weights"):args.index("--weights") + 2]
    if command in ("train", "pretrain"):
        args += FAST
    if command == "predict" and "--model" not in args:
        args += ["--model", LOCAL_MODEL]
    if command == "inspect":
        model = args[args.index("--model") + 1] if "--model" in args else "ViTB16"
        if model in list_models():
            args += ["--image-size", "32"]
    return args


def _image(path, rng, size=(40, 50)):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(rng.integers(0, 255, size=(*size, 3), dtype=np.uint8)).save(path)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    """The files the docs' lines refer to, made once (the runs by the docs' own commands)."""
    folder = tmp_path_factory.mktemp("docs_workspace")
    rng = np.random.default_rng(0)
    for name in ("cat.jpg", "dog.png"):
        _image(folder / name, rng)
    siglip_folder(str(folder / "siglip2-base-patch16-224"), "gemma")
    for label in ("cats", "dogs"):
        for i in range(4):
            _image(folder / "path" / "to" / "folder" / label / f"{i}.png", rng, (12, 12))
    write_shapes(str(folder / "path" / "to" / "shapes"), count=8, size=16)  # images/ + masks/ (docs/dense.md)
    previous = os.getcwd()
    os.chdir(folder)
    try:
        assert main(prepared(["keras-vit", "train"])) == 0
        assert main(prepared(["keras-vit", "pretrain"])) == 0
        assert main(prepared(["keras-vit", "train", "--lora-rank", "4", "--output-dir", "runs/lora"])) == 0
        assert main(prepared(["keras-vit", "train", "--task", "segmentation", "--data", "path/to/shapes",
                              "--output-dir", "runs/shapes"])) == 0
    finally:
        os.chdir(previous)
    assert (folder / LOCAL_MODEL).is_file() and (folder / "runs/masked_patch_digits/encoder.keras").is_file()
    assert (folder / "runs/lora/lora.npz").is_file()
    return folder


@pytest.mark.parametrize(("page", "needs", "line"), list(command_lines()),
                         ids=[f"{page}: {line[:70]}" for page, _, line in command_lines()])
def test_documented_command_runs(page, needs, line, workspace, tmp_path, monkeypatch, capsys):
    words = shlex.split(line)
    reason = _skip_reason(needs, words)
    if reason:
        pytest.skip(reason)
    here = tmp_path / "here"
    shutil.copytree(workspace, here)
    monkeypatch.chdir(here)
    args = prepared(words)
    code = main(args)
    captured = capsys.readouterr()
    assert code == 0, f"keras-vit {' '.join(args)} (from {page}): exit {code}\n{captured.err[-3000:]}"
    assert "Traceback" not in captured.err


def test_every_documented_command_kind_is_run():
    """The lines above cover the commands the docs show; none is skipped by a typo."""
    ran = {shlex.split(line)[1] for _, needs, line in command_lines() if not _skip_reason(needs, shlex.split(line))}
    assert {"train", "pretrain", "evaluate", "predict", "export", "inspect", "list-weights", "convert", "zero-shot",
            "embed"} <= ran
