"""Running the `keras-vit` command line in-process from a test."""

import contextlib
import io
import os

from keras_vit.cli import main
from tests.support import JIT

# `keras-vit train` flags of a tiny one-epoch run on the built-in digits.
TINY_TRAIN_FLAGS = [
    "--image-size", "8", "--patch-size", "2", "--hidden-dim", "16", "--depth", "1", "--num-heads", "2",
    "--mlp-dim", "32", "--epochs", "1", "--tensorboard", "false", "--verbose", "0",
    "--set", f"jit_compile={JIT}",
]


def fails(argv, capsys, *expected):
    """Runs the CLI; asserts exit 2 with one error line holding each of `expected`; returns it."""
    assert main([str(a) for a in argv]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("\n") == 1, err
    for text in expected:
        assert text in err, err
    return err


def run_quietly(argv):
    """`(exit code, stderr)` of the command line run in-process, its standard output dropped."""
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = main([str(a) for a in argv])
    return code, err.getvalue()


def snapshot(folder):
    """`{relative path: bytes (None for a folder)}` of everything under `folder`: what a refused
    command must leave as it was."""
    found = {}
    for root, folders, names in os.walk(folder):
        for name in folders:
            found[os.path.relpath(os.path.join(root, name), folder)] = None
        for name in names:
            with open(os.path.join(root, name), "rb") as handle:
                found[os.path.relpath(os.path.join(root, name), folder)] = handle.read()
    return found
