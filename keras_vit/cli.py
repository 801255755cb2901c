"""The `keras-vit` command line: one sub-command per task, registered by its own module."""

import argparse
import errno
import importlib.util
import os
import re
import sys
import tempfile

# Light modules (no Keras): each command imports what it needs when it runs.
from keras_vit.applications import commands as model_commands
from keras_vit.evaluation import commands as evaluation_commands
from keras_vit.inference import commands as inference_commands
from keras_vit.inspect import commands as inspect_commands
from keras_vit.text import commands as text_commands
from keras_vit.training import commands as training_commands
from keras_vit.weights import commands as weights_commands

# Each has `register(subparsers)`, which adds its sub-commands with a `func(args)`, in this order.
COMMANDS = (model_commands, weights_commands, inspect_commands, training_commands, evaluation_commands,
            inference_commands, text_commands)
# The commands that never import Keras. Every other one may import TensorFlow where it is
# installed, whatever the backend: for tf.data, and through Keras itself, whose saving code looks
# for TensorFlow's types when a model is loaded or saved (`keras.src.saving.serialization_lib`).
KERAS_FREE = ("list-models", "list-weights", "convert")
# TensorFlow's start-up lines, written by its C++ libraries before absl logging is set up, which
# TF_CPP_MIN_LOG_LEVEL does not reach (e.g. "oneDNN custom operations are on" on CPUs with AVX-512).
STARTUP_NOISE = re.compile(r"WARNING: All log messages before absl::InitializeLog|I0000 |To enable the following instructions")
# The extra that installs each Keras backend (pyproject.toml).
# A write that did not fit on the disk: EX_TEMPFAIL (run again once there is room).
EXIT_NO_SPACE = 75
BACKEND_EXTRAS = {"tensorflow": "tensorflow", "jax": "jax", "torch": "torch"}


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose refusal is one line (what was wrong, and where to read what is
    accepted), exit code 2; argparse's own prints the whole usage first."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser():
    parser = OneLineParser(
        prog="keras-vit",
        description="Vision Transformers for Keras 3 (backend from KERAS_BACKEND).",
    )
    parser.add_argument(
        "--verbose", dest="show_logs", action="store_true",
        help="show TensorFlow / XLA start-up logging (hidden by default)",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for commands in COMMANDS:
        commands.register(subparsers)
    return parser


def main(argv=None):
    for stream in (sys.stdout, sys.stderr):  # a file name of undecodable bytes is printed escaped, not an error
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    args = build_parser().parse_args(argv)
    if not args.show_logs:  # before TensorFlow or jaxlib is imported; a value already set wins
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        if args.command not in KERAS_FREE:
            _import_tensorflow_quietly()
    try:
        code = args.func(args) or 0
        sys.stdout.flush()  # a closed pipe shows here, not at the interpreter's exit
        return code
    except BrokenPipeError:  # the reader of the output stopped (`| head`): no error to tell
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing left to flush into it
        return 1
    except OSError as error:
        if error.errno != errno.ENOSPC:
            return _failed(args, error)
        print(f"keras-vit {args.command}: error: {_explain(error)}; free some space and run the same command again "
              "(what was there is intact; a run resumes from its last saved state).", file=sys.stderr)
        return EXIT_NO_SPACE
    except (ValueError, ImportError) as error:  # bad input, files, missing packages
        return _failed(args, error)


def _failed(args, error):
    """Exit 2 with one line: bad input, files, missing packages."""
    print(f"keras-vit {args.command}: error: {_explain(error)}", file=sys.stderr)
    return 2


def _import_tensorflow_quietly():
    """Imports TensorFlow (if installed) with its start-up lines kept off stderr; anything else it
    writes there is passed on."""
    if "tensorflow" in sys.modules or importlib.util.find_spec("tensorflow") is None:
        return
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as captured:
        os.dup2(captured.fileno(), 2)
        try:
            import tensorflow  # noqa: F401
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        captured.seek(0)
        text = captured.read().decode(errors="replace")
    kept = [line for line in text.splitlines() if not STARTUP_NOISE.match(line)]
    if kept:
        print("\n".join(kept), file=sys.stderr)


def _explain(error):
    """The message of `error`; a missing backend package also says how to install it."""
    name = (getattr(error, "name", None) or "").split(".")[0]
    if not isinstance(error, ModuleNotFoundError) or name not in BACKEND_EXTRAS:
        return str(error)
    return (
        f"{error}: install it with pip install 'keras-vit[{BACKEND_EXTRAS[name]}]', or set "
        f"KERAS_BACKEND to an installed backend ({', '.join(BACKEND_EXTRAS)})"
    )


if __name__ == "__main__":
    sys.exit(main())
