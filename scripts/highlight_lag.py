#!/usr/bin/env python
"""How far behind the voice the overlay's lit word is (`highlight=words`), in real Chromium.

    python scripts/highlight_lag.py [--start S --seconds N] [--baseline-web DIR] \
        [--ref-words WORDS.json] [--json OUT.json]

What it does, and every option: streamcap/evaluation/highlight_lag.py (this file only starts it).
"""

from streamcap.evaluation.highlight_lag import main

if __name__ == "__main__":
    raise SystemExit(main())
