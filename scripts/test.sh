#!/usr/bin/env bash
# Sets up a fresh machine and runs the whole test suite on TensorFlow, JAX and PyTorch.
# `--quick`: the fast tier on PyTorch (docs/contributing.md), without the set-up once .venv exists.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--quick" ] && [ -x .venv/bin/python ]; then
  exec .venv/bin/python tests/run_backends.py "$@"
fi
bash scripts/setup.sh
# The KerasHub interop tests skip without keras-hub: fail here rather than skip them in CI.
KERAS_BACKEND=jax TF_CPP_MIN_LOG_LEVEL=3 .venv/bin/python -c "import keras_hub"
exec .venv/bin/python tests/run_backends.py "$@"
