"""Where a long run's memory goes: the C heap over many decodes, for each encoder-context grid.

    python scripts/bench_memory.py --decodes 200 --grids 1,5,25

Each grid runs in a process of its own (a fresh heap): the bundled model at `--precision`
decodes `--decodes` windows of real speech cut at random lengths (1-12 s, as a live stream's
partials are), each as a partial (encoder context: its audio + 2 s, at least 6 s, rounded up to
a multiple of the grid's positions, `decoding.batched_encode.CONTEXT_STEP_POSITIONS`) and
every fourth also as a final (the full 30 s context). Every `--every` decodes it prints RSS and
glibc's heap figures (`runtime.memory.heap_figures`: in use, free inside its arenas), and it
ends with the growth of each over the second half of the run, grids side by side. With
`--trim` the heap is trimmed after each final, as the worker does when it goes idle.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from streamcap.evaluation.paths import LONGFORM

CLIPS = LONGFORM / "lf3_real_dev.wav"


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def run_one(args: argparse.Namespace) -> list[dict[str, Any]]:
    """One grid, in this process: the figures every `--every` decodes."""
    import numpy as np
    import soundfile as sf
    import torch

    import streamcap.decoding.batched_encode as be
    from streamcap.core.decode_types import DecodingOptions
    from streamcap.runtime.engine import Engine
    from streamcap.runtime.memory import heap_figures, trim_heap

    be.CONTEXT_STEP_POSITIONS = args.grid
    torch.set_num_threads(args.threads)
    engine = Engine(args.model, device="cpu", precision=args.precision)
    audio, _ = sf.read(args.audio, dtype="float32")
    rng = np.random.default_rng(args.seed)
    opts = DecodingOptions(language="en")
    rows = []
    for i in range(1, args.decodes + 1):
        seconds = float(rng.uniform(1.0, 12.0))
        start = int(rng.integers(0, len(audio) - int(seconds * 16000)))
        window = audio[start : start + int(seconds * 16000)]
        context = max(6.0, seconds + 2.0)
        engine.decode(engine.encode(window, context_s=context), opts)
        if i % 4 == 0:
            engine.decode(engine.encode(window), opts)
            if args.trim:
                trim_heap()
        if i % args.every == 0:
            heap = heap_figures()
            rows.append(
                {
                    "decodes": i,
                    "rss_mb": round(rss_mb(), 1),
                    "in_use_mb": round(heap.get("in_use", float("nan")) / 1e6, 1),
                    "free_mb": round(heap.get("free", float("nan")) / 1e6, 1),
                }
            )
    return rows


def slope(rows: list[dict[str, Any]], key: str) -> float:
    """MB per 100 decodes over the second half of the run (least squares)."""
    import numpy as np

    half = rows[len(rows) // 2 :]
    if len(half) < 2:
        return float("nan")
    x = np.array([r["decodes"] for r in half], dtype=float)
    y = np.array([r[key] for r in half], dtype=float)
    return float(np.polyfit(x, y, 1)[0] * 100)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--decodes", type=int, default=200)
    p.add_argument("--every", type=int, default=25)
    p.add_argument("--grids", default="1,25", help="context grids in encoder positions (1: off)")
    p.add_argument("--model", default="base")
    p.add_argument("--precision", default="auto")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--audio", type=Path, default=CLIPS)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--trim", action="store_true", help="trim the heap after each final")
    p.add_argument("--grid", type=int, help=argparse.SUPPRESS)  # one grid, in this process
    args = p.parse_args(argv)
    if args.grid is not None:
        print(json.dumps(run_one(args)))
        return 0
    results = {}
    for grid in [int(g) for g in args.grids.split(",")]:
        cmd = [sys.executable, "-m", "streamcap.evaluation.bench_memory", "--grid", str(grid)]
        for flag in ("decodes", "every", "model", "precision", "threads", "audio", "seed"):
            cmd += [f"--{flag}", str(getattr(args, flag))]
        cmd += ["--trim"] if args.trim else []
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        rows = json.loads(out.strip().splitlines()[-1])
        results[grid] = rows
        print(f"grid {grid} positions ({grid * 0.02:.2f} s):")
        for r in rows:
            print(f"  {r['decodes']:5d} decodes  RSS {r['rss_mb']:7.1f} MB  heap in use "
                  f"{r['in_use_mb']:7.1f} MB  free {r['free_mb']:7.1f} MB")  # fmt: skip
    print("\ngrowth over the second half, MB per 100 decodes:")
    print(f"{'grid':>6} {'RSS':>8} {'in use':>8} {'free':>8}")
    for grid, rows in results.items():
        print(f"{grid:>6} {slope(rows, 'rss_mb'):8.2f} {slope(rows, 'in_use_mb'):8.2f} "
              f"{slope(rows, 'free_mb'):8.2f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
