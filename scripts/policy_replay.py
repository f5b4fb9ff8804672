#!/usr/bin/env python
"""Record every call a caption policy gets and every answer it gives; replay them on this
checkout's `CaptionPolicy` and compare.

    PYTHONPATH=BEFORE python scripts/policy_replay.py record --audio A.wav [B.wav ...] \
        --out DIR [--decoder standin|model] [--only VARIANT ...] [--seeds N]
    PYTHONPATH=AFTER python scripts/policy_replay.py check DIR/*.pkl

What it does, and every option: streamcap/evaluation/policy_replay.py (this file only starts
it). A BEFORE checkout older than streamcap/evaluation/ records with its own copy of this script.
"""

from streamcap.evaluation.policy_replay import main

if __name__ == "__main__":
    raise SystemExit(main())
