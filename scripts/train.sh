#!/usr/bin/env bash
# Sets up a fresh machine and trains the default model (a small ViT on the digits data set).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/keras-vit train "$@"
