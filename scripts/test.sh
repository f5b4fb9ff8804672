#!/usr/bin/env bash
# The test command (README, CI): set up everything, then lint, type-check, check the layer
# contracts, and run the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --test
.venv/bin/ruff check streamcap tests scripts
.venv/bin/ruff format --check streamcap tests scripts
.venv/bin/mypy                      # [tool.mypy] in pyproject.toml: the streamcap package
.venv/bin/lint-imports --no-cache   # [tool.importlinter]: the layers of CONTRIBUTING.md
exec .venv/bin/python -m pytest -q -ra "$@"
