"""The `keras-vit` command line: one sub-command per task, registered by its own module."""

import argparse
import importlib
import os
import sys

# Each module has `register(subparsers)`, which adds its sub-commands with a `func(args)`.
COMMAND_MODULES = ("keras_vit.applications.commands", "keras_vit.weights.commands", "keras_vit.inspect.commands", "keras_vit.training.commands")


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
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    if not args.show_logs:  # before TensorFlow or jaxlib is imported; a value already set wins
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        return args.func(args) or 0
    except (ValueError, OSError, ImportError) as error:  # bad input, files, missing packages
        print(f"keras-vit {args.command}: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
