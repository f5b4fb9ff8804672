#!/usr/bin/env python3
"""Load test of the caption server: N publishers replay speech at real-time pace, M viewers each.

    python scripts/load_test.py --streams 2 --viewers 3 --seconds 120 --json out/load.json

What it does, and every option: streamcap/evaluation/load_test.py (this file only starts it).
"""

from streamcap.evaluation.load_test import main

if __name__ == "__main__":
    raise SystemExit(main())
