"""The `keras-vit` command line: one sub-command per task, registered by its own module."""

import argparse
import os
import sys

# Light modules (no Keras): each command imports what it needs when it runs.
from keras_vit.applications import commands as model_commands
from keras_vit.inference import commands as inference_commands
from keras_vit.inspect import commands as inspect_commands
from keras_vit.training import commands as training_commands
from keras_vit.weights import commands as weights_commands

# Each has `register(subparsers)`, which adds its sub-commands with a `func(args)`, in this order.
COMMANDS = (model_commands, weights_commands, inspect_commands, training_commands, inference_commands)
# The extra that installs each Keras backend (pyproject.toml).
BACKEND_EXTRAS = {"tensorflow": "tensorflow", "jax": "jax", "torch": "torch"}


def build_parser():
    parser = argparse.ArgumentParser(
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
    args = build_parser().parse_args(argv)
    if not args.show_logs:  # before TensorFlow or jaxlib is imported; a value already set wins
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        return args.func(args) or 0
    except (ValueError, OSError, ImportError) as error:  # bad input, files, missing packages
        print(f"keras-vit {args.command}: error: {_explain(error)}", file=sys.stderr)
        return 2


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
