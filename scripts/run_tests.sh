#!/usr/bin/env bash
# Set up .venv and run the whole test suite (CPU; includes 2-process torchrun tests).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest tests -q "$@"
