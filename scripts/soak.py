#!/usr/bin/env python3
"""Soak test: one long stream at real time, checked window by window for drift.

    python scripts/soak.py --minutes 60 --json out/soak.json

What it does, and every option: streamcap/evaluation/soak.py (this file only starts it).
"""

from streamcap.evaluation.soak import main

if __name__ == "__main__":
    raise SystemExit(main())
