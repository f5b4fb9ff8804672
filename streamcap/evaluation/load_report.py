"""What scripts/load_test.py reports: final latencies against the reference, and the summary.

Apart from the load test's clients and its server. Final latency is the one definition the
live evaluation uses too (`metrics.FinalsAlignment.final_latency`), on a viewer's wall clock:
the time a segment's last word first arrives in a final at the first viewer, minus the time the
segment's end was sent; the words are compared after Whisper's English normaliser (with no
spelling map: `normalise`).
"""

from __future__ import annotations

import functools
import json
import os
import statistics
from pathlib import Path
from typing import Any

import numpy as np

from streamcap.evaluation.load_clients import LoadPlan, ViewerLog
from streamcap.evaluation.load_program import Segment
from streamcap.evaluation.metrics import align_finals, percentile
from streamcap.evaluation.normalize import Normalizer, make_normalizer, words


@functools.cache
def _normalizer() -> Normalizer:
    return make_normalizer(spelling_map=False)[0]


def normalise(text: str) -> list[str]:
    """``text``'s words after Whisper's English normaliser, without a spelling map."""
    return words(_normalizer(), text)


def final_latencies(
    segments: list[Segment], finals: list[tuple[float, str]], t0: float
) -> tuple[list[tuple[float, float]], int]:
    """(segment end in stream seconds, latency in s) per reference segment that a final
    reached, and the number missed (see the module docstring)."""
    found = align_finals([s.text for s in segments], finals, normalise)
    if not found.ref_words:
        return [], 0
    latencies: list[tuple[float, float]] = []
    missed = 0
    for i, s in enumerate(segments):
        latency = found.final_latency(i, s.end, t0)
        if latency is None:
            missed += 1
            continue
        latencies.append((s.end, latency))
    return latencies, missed


def stream_report(
    plan: LoadPlan,
    i: int,
    viewers: list[ViewerLog],
    record: Path,
    t0: float,
    closed_at: float,
) -> tuple[dict[str, Any], list[float]]:
    """Publisher ``i``'s figures (its finals as its first viewer got them against its
    program's reference; what each viewer missed of the recording; partials received) and its
    latencies. ``t0``: the wall time of its stream's start; ``closed_at``: of the publishers'
    close."""
    s = plan.streams[i]
    speaker = plan.speaker_of(s)
    path = record / f"{plan.room_of(s)}.jsonl"
    recorded = [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []
    if plan.room:
        recorded = [r for r in recorded if r.get("speaker") == speaker]
    rec_seqs = {r["seq"] for r in recorded}
    finals = [
        (t, ev["text"])
        for t, ev in viewers[0].events
        if ev["type"] == "final" and ev.get("speaker") == speaker
    ]
    segments = plan.programs[i].segments
    timed, missed = final_latencies(segments, finals, t0)
    lat = [x for _, x in timed]
    got = [
        {ev["seq"] for _, ev in v.events if ev["type"] == "final" and ev.get("speaker") == speaker}
        for v in viewers
    ]
    return {
        "segments": len(segments),
        "missed_segments": missed,
        "final_latency_p50": percentile(lat, 50),
        "final_latency_p95": percentile(lat, 95),
        "final_latency_max": max(lat) if lat else None,
        "finals_recorded": len(recorded),
        "finals_after_publishers_closed": sum(t > closed_at + 2.0 for t, _ in finals),
        "dropped_finals_per_viewer": [len(rec_seqs - seqs) for seqs in got],
        "partials_received_per_viewer": [
            sum(ev["type"] == "partial" for _, ev in v.events) for v in viewers
        ],
        "viewer_errors": [v.error for v in viewers if v.error],
        "latency_by_segment_end": [[round(a, 2), round(b, 3)] for a, b in timed],
    }, lat


def server_figures(samples: list[dict[str, float]], n_streams: int) -> dict[str, Any]:
    """The server's CPU (mean, per stream), the machine's busy share, the server's RSS (start,
    max, end, slope over the second half) and the worker's deepest queue, from the samples."""
    rss = [x["rss_mb"] for x in samples]
    cpu = [x["cpu_pct"] for x in samples]
    half = len(rss) // 2
    slope = None
    if half >= 2:
        ts = np.array([x["t"] for x in samples[half:]])
        slope = float(np.polyfit(ts / 60.0, np.array(rss[half:]), 1)[0])
    cpu_mean = statistics.fmean(cpu[1:]) if len(cpu) > 1 else None
    return {
        "server_cpu_pct_mean": cpu_mean,
        "server_cpu_pct_per_stream": cpu_mean / n_streams if cpu_mean else None,
        "machine_cores": os.cpu_count(),
        "machine_busy_pct_mean": (
            statistics.fmean(x["machine_busy_pct"] for x in samples) if samples else None
        ),
        "server_rss_mb_start": rss[0] if rss else None,
        "server_rss_mb_max": max(rss) if rss else None,
        "server_rss_mb_end": rss[-1] if rss else None,
        "server_rss_slope_mb_per_min_second_half": slope,
        "queue_depth_max": max((x["queue_depth"] for x in samples), default=None),
    }


def brief(report: dict[str, Any]) -> dict[str, Any]:
    """The report without its time series (printed; the JSON keeps them)."""
    out = {k: v for k, v in report.items() if k != "samples"}
    out["streams"] = {
        s: {k: v for k, v in r.items() if k != "latency_by_segment_end"}
        for s, r in report.get("streams", {}).items()
    }
    return out


def print_side_by_side(summary: dict[str, dict[str, Any]]) -> None:
    """The backends' main figures in columns, and ray / local latency ratios."""
    rows = [
        ("final latency p50 (s)", "final_latency_p50"),
        ("final latency p95 (s)", "final_latency_p95"),
        ("dropped finals", "dropped_finals"),
        ("missed segments", "missed_segments"),
        ("server CPU, % of a core", "server_cpu_pct_mean"),
        ("server CPU per stream, %", "server_cpu_pct_per_stream"),
        ("server RSS max (MB)", "server_rss_mb_max"),
        ("bridge CPU, % of a core", "bridge_cpu_pct_mean"),
        ("finals resent", "finals_resent"),
        ("transport p95 (s)", "transport_p95_s"),
    ]
    names = list(summary)
    print()
    print(f"{'':28}" + "".join(f"{n:>12}" for n in names))
    for label, key in rows:
        cells = []
        for n in names:
            v = summary[n].get(key)
            cells.append(f"{v:12.3f}" if isinstance(v, float) else f"{v!s:>12}")
        print(f"{label:28}" + "".join(cells))
    if "local" in summary and "ray" in summary:
        a, b = summary["local"], summary["ray"]
        for key in ("final_latency_p50", "final_latency_p95"):
            if a.get(key) and b.get(key):
                print(f"ray / local {key}: {b[key] / a[key]:.2f}x")
    for n in names:
        for rid, r in (summary[n].get("replicas") or {}).items():
            print(f"{n} replica {rid} (pid {r['pid']}): {r['finals']:.0f} finals, "
                  f"{r['partials']:.0f} partials, busy {100 * r['busy_share']:.0f}%")  # fmt: skip
