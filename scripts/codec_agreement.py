#!/usr/bin/env python3
"""Does a lossy copy of a recording pause where the recording does? (issue 23: jfk.mp4)

    python scripts/codec_agreement.py [--aac-kbps 128] [FILES...]
    python scripts/codec_agreement.py --captions [--set NAME=VALUE] [FILES...]

What it does, and every option: streamcap/evaluation/codec_agreement.py (this file only starts it).
"""

from streamcap.evaluation.codec_agreement import main

if __name__ == "__main__":
    raise SystemExit(main())
