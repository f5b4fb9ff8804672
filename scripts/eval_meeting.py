#!/usr/bin/env python
"""Evaluate speaker labels from one microphone on a long recording with reference speakers.

    python scripts/eval_meeting.py --audio A.wav --reference R.json --json OUT.json \
        [--model base] [--clock simulated|real] [--png OUT.png] [--speaker-set NAME=VALUE]
    python scripts/eval_meeting.py --audio A.wav --reference R.json --json OUT.json \
        --offline              # `streamcap transcribe --speakers auto`'s path instead
    python scripts/eval_meeting.py --audio A.wav --reference R.json --json OUT.json \
        --replay RUN.json      # relabel the finals of an earlier run (no Whisper: tuning)

What it does, and every option: streamcap/evaluation/eval_meeting.py (this file only starts it).
"""

from streamcap.evaluation.eval_meeting import main

if __name__ == "__main__":
    raise SystemExit(main())
