#!/usr/bin/env python
"""Make a harder real-speech long-form file from lf3: every utterance sped up, short gaps.

    python scripts/make_hard_longform.py [--tempo 1.3] [--gap 0.1 0.3] [--seed 0] \
        [--babble SNR_DB] [--out-dir out/longform]

What it does, and every option: streamcap/evaluation/make_hard_longform.py (this file
only starts it).
"""

from streamcap.evaluation.make_hard_longform import main

if __name__ == "__main__":
    raise SystemExit(main())
