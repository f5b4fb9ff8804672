"""What scripts/load_test.py reports: final latencies against the reference, and the summary.

A sibling module of the load test, apart from its clients and its server. Final latency is the
one definition the live evaluation uses too (`reference_alignment`), on a viewer's wall clock:
the time a segment's last word first arrives in a final at the first viewer, minus the time the
segment's end was sent; the words are compared after Whisper's English normaliser (with no
spelling map: `normalise`).
"""

from __future__ import annotations

import re
from typing import Any

from load_program import Segment
from reference_alignment import align_finals

_NORMALISER: Any = None


def normalise(text: str) -> list[str]:
    global _NORMALISER
    if _NORMALISER is None:
        try:
            from transformers.models.whisper.english_normalizer import EnglishTextNormalizer

            _NORMALISER = EnglishTextNormalizer({})
        except ImportError:  # pragma: no cover
            _NORMALISER = lambda s: re.sub(r"[^a-z0-9' ]+", " ", s.lower())  # noqa: E731
    return str(_NORMALISER(text)).split()


def final_latencies(
    segments: list[Segment], finals: list[tuple[float, str]], t0: float
) -> tuple[list[tuple[float, float]], int]:
    """(segment end in stream seconds, latency in s) per reference segment that a final
    reached, and the number missed (see the module docstring; `reference_alignment`)."""
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


def brief(report: dict[str, Any]) -> dict[str, Any]:
    """The report without its time series (printed; the JSON keeps them)."""
    out = {k: v for k, v in report.items() if k != "samples"}
    out["streams"] = {
        s: {k: v for k, v in r.items() if k != "latency_by_segment_end"}
        for s, r in report.get("streams", {}).items()
    }
    return out


def print_side_by_side(summary: dict[str, dict[str, Any]]) -> None:
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
