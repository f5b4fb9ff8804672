"""The PNGs of an evaluated run: when each reference segment's words showed, who was labelled.

Apart from the measurements: matplotlib only draws what `metrics.evaluate` and
`meeting_metrics` measured, and is imported only when a plot is made.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from streamcap.core.captions import Caption
from streamcap.evaluation.meeting_metrics import UNLABELLED, hypothesis_turns
from streamcap.evaluation.metrics import Segments, Timeline


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot(path: Path, events: Timeline, metrics: dict[str, Any], segments: Segments,
         duration: float, title: str) -> None:  # fmt: skip
    """One row per reference segment: its audio (grey), the partials that showed its words
    (blue ticks, at emit time) and the moment its last word became final (red triangle, with
    the final's text). Below, the latencies per segment against the targets."""
    plt = _pyplot()
    rows = metrics.get("segments", [])
    n = max(1, len(segments))
    width = min(40.0, max(14.0, duration * 0.1))
    fig, (ax, lat) = plt.subplots(
        2, 1, figsize=(width, 2.5 + 0.28 * n), sharex=True,
        gridspec_kw={"height_ratios": [0.28 * n, 2.2]},
    )  # fmt: skip
    _draw_timeline(ax, events, metrics, segments, n)
    ax.set_title(title + "\nrows: reference segments (grey, audio time); blue |: partial "
                 "showing a word of it; green |: final; red <: its last word final (latency); "
                 "purple x: caption matching no segment", fontsize=8)  # fmt: skip
    _draw_latencies(lat, rows, duration)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _draw_timeline(
    ax: Any, events: Timeline, metrics: dict[str, Any], segments: Segments, n: int
) -> None:
    """The segments' rows: audio, the events showing their words, their finals' latencies,
    and below them the captions that match no segment."""
    rows = metrics.get("segments", [])
    shows: list[list[int]] = metrics.get("event_segments", [[] for _ in events])
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
    ax.grid(axis="x", alpha=0.3)


def _draw_latencies(lat: Any, rows: list[dict[str, Any]], duration: float) -> None:
    """Final latency at each segment's end, first-partial latency at its start, the targets."""
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


def plot_speakers(
    path: Path,
    segments: Segments,
    finals: list[Caption],
    label_map: dict[str, str],
    duration: float,
    title: str,
) -> None:
    """Top: reference speakers (one row each) over time; bottom: the emitted labels, each
    drawn in the colour of the reference speaker it maps to (grey: mapped to none)."""
    plt = _pyplot()
    speakers = list(dict.fromkeys(s["speaker"] for s in segments))
    cmap = plt.get_cmap("tab10" if len(speakers) <= 10 else "tab20")
    colour = {s: cmap(i % cmap.N) for i, s in enumerate(speakers)}
    labels = sorted({c.speaker or UNLABELLED for c in finals},
                    key=lambda x: (x == UNLABELLED, len(x), x))  # fmt: skip
    rows = len(speakers) + len(labels)
    fig, ax = plt.subplots(figsize=(min(40.0, max(14.0, duration * 0.08)), 1.5 + 0.32 * rows))
    for i, s in enumerate(speakers):
        y = rows - 1 - i
        for seg in segments:
            if seg["speaker"] == s:
                ax.barh(y, seg["end"] - seg["start"], left=seg["start"], height=0.7,
                        color=colour[s])  # fmt: skip
    for j, label in enumerate(labels):
        y = len(labels) - 1 - j
        ref = label_map.get(label)
        for a, b, lab in hypothesis_turns(finals):
            if lab == label:
                ax.barh(y, b - a, left=a, height=0.7, color=colour.get(ref or "", "0.6"),
                        edgecolor="k", linewidth=0.4)  # fmt: skip
    ax.axhline(len(labels) - 0.5, color="k", lw=0.8)
    ticks = [f"ref: {s}" for s in speakers] + [
        f"{lab} -> {label_map.get(lab, 'none')}" for lab in labels
    ]
    ax.set_yticks(range(rows - 1, -1, -1), ticks, fontsize=7)
    ax.set_xlim(0, duration + 1)
    ax.set_xlabel("stream time (s)")
    ax.set_title(title + "\nabove the line: reference speakers; below: emitted labels (each "
                 "final's [start, end]), coloured as the reference speaker they map to",
                 fontsize=8)  # fmt: skip
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
