#!/usr/bin/env python3
"""Fault check (docs/scaling.md): the Ray head (GCS) dies under a running gateway, mid-stream,

    python scripts/head_loss_check.py

What it does, and every option: streamcap/evaluation/head_loss_check.py (this file only starts it).
"""

from streamcap.evaluation.head_loss_check import main

if __name__ == "__main__":
    raise SystemExit(main())
