#!/usr/bin/env python
"""Evaluate the live captioning pipeline on one long recording with reference segments.

    python scripts/eval_stream.py --audio A.wav --reference R.json --json OUT.json \
        [--clock simulated|real] [--model base] [--png OUT.png]

What it does, and every option: streamcap/evaluation/eval_stream.py (this file only starts it).
"""

from streamcap.evaluation.eval_stream import main

if __name__ == "__main__":
    raise SystemExit(main())
