"""Plain greedy vs speculative decoding on live-style replays; see ``streamcap/bench.py``.

    python scripts/bench_decoding.py --manifest ../shared/eval-dev/manifest.jsonl \
        --lang en --kind real --step 1.0 --json out/bench.json
"""

from streamcap.cli.bench import main

if __name__ == "__main__":
    raise SystemExit(main())
