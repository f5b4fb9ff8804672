#!/usr/bin/env python3
"""A flooding publisher against a real `streamcap serve`, side by side with the calm case.

    python scripts/flood_test.py [--seconds 40] [--kind frames|download] [--json out/flood.json]

What it does, and every option: streamcap/evaluation/flood_test.py (this file only starts it).
"""

from streamcap.evaluation.flood_test import main

if __name__ == "__main__":
    raise SystemExit(main())
