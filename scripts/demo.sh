#!/usr/bin/env bash
# The main job on a fresh machine: set up, then caption the bundled speech sample live
# through the caption server (prints captions and the overlay URL). Extra flags go to
# `streamcap demo`, e.g. `bash scripts/demo.sh --keep-serving`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/streamcap demo "$@"
