#!/usr/bin/env bash
# Creates .venv (if missing) and installs keras_vit with all three backends and the test tools,
# at the CPU versions CI tests (scripts/constraints-cpu.txt).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -c scripts/constraints-cpu.txt -e ".[all,test]"
# keras-hub, for the KerasHub interop tests: --no-deps, because its tensorflow-text requirement
# would pull the full tensorflow over tensorflow-cpu; what it imports (regex and tokenizers, from
# transformers) comes with the line above.
.venv/bin/python -m pip install --quiet --no-deps -c scripts/constraints-cpu.txt keras-hub
