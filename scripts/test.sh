#!/usr/bin/env bash
# The test command (README, CI): set up everything, then run the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --test
.venv/bin/ruff check streamcap tests scripts
exec .venv/bin/python -m pytest -q -ra "$@"
