"""Soak test: one long stream at real time, checked window by window for drift.

    python scripts/soak.py --minutes 60 --json out/soak.json

Runs `scripts/load_test.py` (the real server as a subprocess, publishers at real-time pace,
viewers, `--record`) on recorded speech looped (default lf3, the workplace's recorded dev
file), then splits the run into windows (`--window`, 10 minutes) and prints per window: final
latency p50/p95 (by the reference segment's end), the server's RSS, the C heap in use and free
inside glibc's arenas (`streamcap_heap_bytes` from /metrics) and the events its logs hold in
memory. It fails (exit 1), saying why, when
- a window's p95 exceeds the first window's by more than `--max-p95-rise` (0.3 s), or
- the RSS slope after `--warmup` (10 minutes) exceeds `--max-slope` (0.2 MB/min), or
- a segment was missed or a final dropped.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from streamcap.evaluation import load_test
from streamcap.evaluation.metrics import percentile
from streamcap.evaluation.output import fmt
from streamcap.evaluation.paths import LONGFORM

LF3 = LONGFORM / "lf3_real_dev.json"


def windows(report: dict[str, Any], window_s: float) -> list[dict[str, Any]]:
    """Per-window figures of a load_test report (latency by segment end, samples by time)."""
    lat = [
        tuple(x) for r in report["streams"].values() for x in r.get("latency_by_segment_end", [])
    ]
    samples = report["samples"]
    n = max(1, int(np.ceil(report["seconds"] / window_s)))
    rows = []
    for k in range(n):
        a, b = k * window_s, (k + 1) * window_s
        mine = [x for t, x in lat if a <= t < b]
        ss = [s for s in samples if a <= s["t"] < b]
        last = ss[-1] if ss else {}
        rows.append(
            {
                "window": f"{a / 60:.0f}-{b / 60:.0f} min",
                "segments": len(mine),
                "p50": percentile(mine, 50),
                "p95": percentile(mine, 95),
                "max": max(mine) if mine else None,
                "rss_mb": last.get("rss_mb"),
                "heap_in_use_mb": last.get("heap_in_use_mb"),
                "heap_free_mb": last.get("heap_free_mb"),
                "events_in_memory": last.get("finals_in_memory"),
            }
        )
    return rows


def rss_slope(samples: list[dict[str, Any]], after_s: float) -> float | None:
    """MB per minute, least squares over the samples after `after_s`."""
    late = [s for s in samples if s["t"] >= after_s]
    if len(late) < 3:
        return None
    t = np.array([s["t"] for s in late]) / 60.0
    return float(np.polyfit(t, np.array([s["rss_mb"] for s in late]), 1)[0])


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--minutes", type=float, default=60.0, help="length of the run")
    p.add_argument("--window", type=float, default=600.0, help="seconds per window")
    p.add_argument("--warmup", type=float, default=600.0, help="seconds before the RSS slope")
    p.add_argument("--max-p95-rise", type=float, default=0.3)
    p.add_argument("--max-slope", type=float, default=0.2, help="MB/min after the warm-up")
    p.add_argument("--reference", type=Path, default=LF3, help="long-form reference JSON")
    p.add_argument("--streams", type=int, default=1)
    p.add_argument("--viewers", type=int, default=2)
    p.add_argument("--json", type=Path, help="write the windows and the load report here")
    p.add_argument(
        "--server-arg", action="append", default=[], metavar="ARG",
        help="extra `streamcap serve` argument (repeat)",
    )  # fmt: skip
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    report = run_load_test(args)
    rows = windows(report, args.window)
    slope = rss_slope(report["samples"], args.warmup)
    print_windows(rows)
    print(f"RSS slope after {args.warmup / 60:.0f} min: {fmt(slope, '.3f')} MB/min")
    failures = check(args, report, rows, slope)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        out = {"windows": rows, "rss_slope_mb_per_min": slope, "failures": failures,
               "load": report}  # fmt: skip
        args.json.write_text(json.dumps(out, indent=2) + "\n")
    for f in failures:
        print(f"soak: FAIL: {f}", file=sys.stderr)
    if not failures:
        print("soak: ok")
    return 1 if failures else 0


def run_load_test(args: argparse.Namespace) -> dict[str, Any]:
    """`load_test` for the whole run (a sample every 10 s): its report."""
    with tempfile.TemporaryDirectory(prefix="streamcap-soak-") as tmp:
        raw = Path(tmp) / "load.json"
        cmd = [
            "--streams", str(args.streams), "--viewers", str(args.viewers),
            "--seconds", str(args.minutes * 60), "--reference", str(args.reference),
            "--sample-every", "10", "--json", str(raw),
        ]  # fmt: skip
        for extra in args.server_arg:
            cmd.append(f"--server-arg={extra}")
        load_test.main(cmd)
        report: dict[str, Any] = json.loads(raw.read_text())
    return report


def print_windows(rows: list[dict[str, Any]]) -> None:
    print()
    head = ("window", "segs", "p50 s", "p95 s", "max s", "RSS MB", "heap use", "heap free",
            "in memory")  # fmt: skip
    print("".join(f"{h:>11}" for h in head))
    for r in rows:
        cells = [r["window"], str(r["segments"]), fmt(r["p50"]), fmt(r["p95"]), fmt(r["max"]),
                 fmt(r["rss_mb"], ".0f"), fmt(r["heap_in_use_mb"], ".0f"),
                 fmt(r["heap_free_mb"], ".0f"), fmt(r["events_in_memory"], ".0f")]  # fmt: skip
        print("".join(f"{c:>11}" for c in cells))


def check(
    args: argparse.Namespace, report: dict[str, Any], rows: list[dict[str, Any]],
    slope: float | None,
) -> list[str]:  # fmt: skip
    """Why the run fails (none: it passes): see the module docstring."""
    failures = []
    first = next((r["p95"] for r in rows if r["p95"] is not None), None)
    for r in rows:
        if first is not None and r["p95"] is not None and r["p95"] > first + args.max_p95_rise:
            failures.append(f"window {r['window']}: p95 {r['p95']:.2f} s > first {first:.2f} s"
                            f" + {args.max_p95_rise}")  # fmt: skip
    if slope is not None and slope > args.max_slope:
        failures.append(f"RSS grows {slope:.2f} MB/min after the warm-up (> {args.max_slope})")
    if report["missed_segments"] or report["dropped_finals"] or report["errors"]:
        failures.append(
            f"missed {report['missed_segments']}, dropped {report['dropped_finals']}, "
            f"errors {report['errors']}"
        )
    return failures


if __name__ == "__main__":
    raise SystemExit(main())
