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
