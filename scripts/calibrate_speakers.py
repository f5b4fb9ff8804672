#!/usr/bin/env python
"""Choose the speaker labeller's similarity thresholds from clips, not from a meeting's DER.

    python scripts/calibrate_speakers.py --json OUT.json [--exclude lf3] [--exclude lf2] ...

What it does, and every option: streamcap/evaluation/calibrate_speakers.py (this file
only starts it).
"""

from streamcap.evaluation.calibrate_speakers import main

if __name__ == "__main__":
    raise SystemExit(main())
