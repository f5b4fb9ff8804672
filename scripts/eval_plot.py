"""The timeline PNG of an evaluated live run: when each reference segment's words showed.

A sibling module of scripts/eval_stream.py, apart from the measurements: matplotlib only draws
what `stream_metrics.evaluate` measured, and is imported only when a plot is made.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from streamcap.core.captions import Caption


def plot(path: Path, events: list[tuple[float, Caption]], metrics: dict[str, Any],
         segments: list[dict[str, Any]], duration: float, title: str) -> None:  # fmt: skip
    """One row per reference segment: its audio (grey), the partials that showed its words
    (blue ticks, at emit time) and the moment its last word became final (red triangle, with
    the final's text). Below, the latencies per segment against the targets."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = metrics.get("segments", [])
    shows: list[list[int]] = metrics.get("event_segments", [[] for _ in events])
    n = max(1, len(segments))
    width = min(40.0, max(14.0, duration * 0.1))
    fig, (ax, lat) = plt.subplots(
        2, 1, figsize=(width, 2.5 + 0.28 * n), sharex=True,
        gridspec_kw={"height_ratios": [0.28 * n, 2.2]},
    )  # fmt: skip
    for i, seg in enumerate(segments):
        y = n - 1 - i
        ax.barh(y, seg["end"] - seg["start"], left=seg["start"], height=0.6, color="0.8")
        lat_i = rows[i].get("final_latency") if i < len(rows) else None
        x = seg["end"] + max(0.0, lat_i or 0.0) + 3.2
        ax.text(x, y, seg["text"][:70], fontsize=6.5, va="center", color="0.25")
    for (t, cap), segs in zip(events, shows, strict=True):
        for i in segs:
            y = n - 1 - i
            if cap.type == "partial":
                ax.plot(t, y + 0.2, "|", color="tab:blue", ms=7, mew=1.2)
            else:
                ax.plot(t, y - 0.2, "|", color="tab:green", ms=7, mew=1.2)
    for i, row in enumerate(rows):
        if row.get("final_latency") is not None:
            y = n - 1 - i
            t = row["end"] + row["final_latency"]
            ax.plot(t, y, "<", color="tab:red", ms=6)
            ax.text(t + 0.25, y, f"{row['final_latency']:.2f} s", fontsize=6, va="center",
                    color="tab:red")  # fmt: skip
    noise = [(t, c) for (t, c), segs in zip(events, shows, strict=True) if not segs and c.text]
    for t, cap in noise:  # captions aligned to no reference segment (hallucination candidates)
        ax.plot(t, -0.8, "x", color="tab:purple", ms=6)
        ax.text(t, -1.3, cap.text[:30], fontsize=6, color="tab:purple", rotation=20)
    ax.set_yticks([])
    ax.set_ylim(-1.6, n)
    ax.set_title(title + "\nrows: reference segments (grey, audio time); blue |: partial "
                 "showing a word of it; green |: final; red <: its last word final (latency); "
                 "purple x: caption matching no segment", fontsize=8)  # fmt: skip
    ax.grid(axis="x", alpha=0.3)
    xs = [r["end"] for r in rows if r["final_latency"] is not None]
    ys = [r["final_latency"] for r in rows if r["final_latency"] is not None]
    lat.bar(xs, ys, width=0.8, color="tab:red", label="final latency (s, at segment end)")
    xs = [r["start"] for r in rows if r.get("first_partial_latency") is not None]
    ys = [r["first_partial_latency"] for r in rows if r.get("first_partial_latency") is not None]
    lat.bar(xs, ys, width=0.5, color="tab:blue", alpha=0.7, label="first-partial latency (s)")
    for level, style in ((1.0, ":"), (1.5, "-."), (2.0, "--")):
        lat.axhline(level, color="k", ls=style, lw=0.6)
    lat.set_xlabel("stream time (s)")
    lat.set_ylabel("seconds")
    lat.legend(fontsize=7, loc="upper right")
    lat.set_xlim(0, duration + 3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
