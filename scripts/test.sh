#!/usr/bin/env bash
# Sets up a fresh machine and runs the whole test suite on TensorFlow, JAX and PyTorch.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python tests/run_backends.py "$@"
