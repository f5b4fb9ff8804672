"""Batched decoder steps and encoder calls vs batch 1, on real speech (bundled ``base``).

    .venv/bin/python scripts/bench_batching.py --threads 2 --finals

What it does, and every option: streamcap/evaluation/bench_batching.py (this file only starts it).
"""

from streamcap.evaluation.bench_batching import main

if __name__ == "__main__":
    raise SystemExit(main())
