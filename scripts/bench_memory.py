#!/usr/bin/env python3
"""Where a long run's memory goes: the C heap over many decodes, for each encoder-context grid.

    python scripts/bench_memory.py --decodes 200 --grids 1,5,25

What it does, and every option: streamcap/evaluation/bench_memory.py (this file only starts it).
"""

from streamcap.evaluation.bench_memory import main

if __name__ == "__main__":
    raise SystemExit(main())
