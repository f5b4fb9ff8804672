#!/usr/bin/env python3
"""Cut a long-form file into its reference utterances: a manifest `bench` can run.

    python scripts/longform_manifest.py ../shared/eval-dev/longform/lf3_real_dev.json out/lf3_utts

What it does, and every option: streamcap/evaluation/longform_manifest.py (this file
only starts it).
"""

from streamcap.evaluation.longform_manifest import main

if __name__ == "__main__":
    raise SystemExit(main())
