"""Running the `keras-vit` command line in-process from a test."""

import contextlib
import io
import os
import subprocess
import sys
import textwrap

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


def run_limited(argv, limit_gib=3, timeout=120):
    """The CLI in a subprocess, once per list of `argv`, under an address-space limit of
    `limit_gib` GiB (a regression raises MemoryError there instead of exhausting the machine)
    and a time limit (a hang fails the test); prints "rc CODE" per command."""
    limit = int(limit_gib * 2**30)
    script = textwrap.dedent(f"""
        import resource, sys
        sys.argv = ["keras-vit"]  # as the command line runs: no Keras until a command needs a model
        resource.setrlimit(resource.RLIMIT_AS, ({limit}, {limit}))
        from keras_vit.cli import main
        for argv in {[[str(a) for a in args] for args in argv]!r}:
            print("rc", main(argv), flush=True)
    """)
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=timeout)
