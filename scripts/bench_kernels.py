"""Side-by-side timings of the decoder step's two halves, on real decoder states.

    python scripts/bench_kernels.py [--threads 2] [--json out.json]

What it does, and every option: streamcap/evaluation/bench_kernels.py (this file only starts it).
"""

from streamcap.evaluation.bench_kernels import main

if __name__ == "__main__":
    raise SystemExit(main())
