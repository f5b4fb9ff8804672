"""The names on the words being spoken: how long partials show a wrong name, and how soon a
change of voice is named right (issue 37, item 1). Pure: a caption timeline, the reference
segments and the label -> reference speaker mapping in; figures out.

What a viewer sees is modelled from the timeline alone: a segment's latest partial is on
screen from its emission until the segment's next event (its next partial, or its final,
which replaces it); the last partial of a run until the run's last emission. Its name is the
partial's own ``speaker``; an unnamed partial ("") is shown by the ``unnamed`` rule:

- ``"own_line"``: on a line of its own, without a name (the overlay since issue 37);
- ``"previous"``: under the name of the last labelled final before it (the overlay before:
  it continued an unnamed partial on the previous speaker's line).

A partial's *voice* is the reference speaker who overlaps its span ``[start, end]`` most (none
when no reference speech does: not scored). A shown name is right when the mapping takes it to
that speaker; a name the mapping does not know (a label matched to nobody) is wrong.

Figures (each defined here once; scripts/eval_meeting.py reports them):

- ``partial_shown_s``: seconds partials are on screen (scored ones);
- ``partial_wrong_name_s``: seconds a partial is on screen under a wrong name;
- ``partial_unnamed_s`` / ``partial_right_name_s``: unnamed / under the right name;
- ``voice_changes``: reference turns whose speaker differs from the turn before and was heard
  earlier in the file (a voice the labeller could know); ``voice_changes_new``: those whose
  speaker speaks for the first time (no name is possible before their final);
- ``naming_delay_s_p50`` / ``_p95``: over ``voice_changes``, seconds from the turn's start
  (reference) to the first emission, partial or final, of a caption of that turn under its
  right name; ``named_within_1_5s``: how many of them took at most 1.5 s;
  ``never_named``: turns with no caption under the right name (a wrong final);
- ``naming_lag_s_p50`` / ``_p95``: the same from the turn's first caption on screen (the
  words' own latency taken out: how long the words ran unnamed or misnamed).

A caption belongs to the turn (reference segment) its span overlaps most.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from streamcap.core.captions import Caption
from streamcap.evaluation.metrics import Segments, percentile

Unnamed = Literal["own_line", "previous"]
#: The naming goal of issue 37: a voice heard before is named within this many seconds.
NAMING_GOAL_S = 1.5


def _overlap(a0: float, a1: float, b0: float, b1: float) -> float:
    return max(0.0, min(a1, b1) - max(a0, b0))


def turn_of(caption: Caption, segments: Segments) -> int | None:
    """The index of the reference segment the caption's span overlaps most (None: none)."""
    best, best_o = None, 0.0
    for i, s in enumerate(segments):
        o = _overlap(caption.start, caption.end, s["start"], s["end"])
        if o > best_o:
            best, best_o = i, o
    return best


def shown_names(
    events: Sequence[tuple[float, Caption]], unnamed: Unnamed
) -> list[tuple[float, float, Caption, str]]:
    """(from, until, partial, name shown: "" for none) per partial with text, as a viewer
    sees them (see the module's docstring)."""
    end_of_run = max((t for t, _ in events), default=0.0)
    out: list[tuple[float, float, Caption, str]] = []
    last_final_name = ""
    for i, (t, cap) in enumerate(events):
        if cap.type == "final" and cap.text.strip():
            last_final_name = cap.speaker or last_final_name
            continue
        if cap.type != "partial" or not cap.text.strip():
            continue
        until = next(
            (u for u, later in events[i + 1 :] if later.segment == cap.segment), end_of_run
        )
        name = cap.speaker or (last_final_name if unnamed == "previous" else "")
        out.append((t, until, cap, name))
    return out


def partial_name_figures(
    events: Sequence[tuple[float, Caption]],
    segments: Segments,
    label_map: Mapping[str, str],
    unnamed: Unnamed = "own_line",
) -> dict[str, Any]:
    """The figures of the module's docstring for one run."""
    shown = wrong = none = right = 0.0
    for t0, t1, cap, name in shown_names(events, unnamed):
        k = turn_of(cap, segments)
        if k is None or t1 <= t0:
            continue
        d = t1 - t0
        shown += d
        if not name:
            none += d
        elif label_map.get(name) == segments[k]["speaker"]:
            right += d
        else:
            wrong += d
    delays, lags, new_voices, never = [], [], 0, 0
    named = {i: [(t, n) for t, _, c, n in shown_names(events, unnamed) if turn_of(c, segments) == i]
             for i in range(len(segments))}  # fmt: skip
    for t, cap in events:  # finals name their turn too
        if cap.type == "final" and cap.text.strip() and (k := turn_of(cap, segments)) is not None:
            named[k].append((t, cap.speaker))
    heard: set[str] = set()
    for i, seg in enumerate(segments):
        who = seg["speaker"]
        change = i == 0 or segments[i - 1]["speaker"] != who
        if change and who not in heard:
            new_voices += i > 0
        elif change:
            times = sorted(named[i])
            ok = [t for t, n in times if n and label_map.get(n) == who]
            if not ok:
                never += 1
            else:
                delays.append(ok[0] - seg["start"])
                lags.append(ok[0] - times[0][0])
        heard.add(who)
    return {
        "partial_shown_s": round(shown, 2),
        "partial_wrong_name_s": round(wrong, 2),
        "partial_unnamed_s": round(none, 2),
        "partial_right_name_s": round(right, 2),
        "voice_changes": len(delays) + never,
        "voice_changes_new": new_voices,
        "naming_delay_s_p50": percentile(delays, 50),
        "naming_delay_s_p95": percentile(delays, 95),
        "named_within_1_5s": sum(d <= NAMING_GOAL_S for d in delays),
        "never_named": never,
        "naming_lag_s_p50": percentile(lags, 50),
        "naming_lag_s_p95": percentile(lags, 95),
    }


def main(argv: list[str] | None = None) -> int:
    """``python -m streamcap.evaluation.partial_names RUN.json REFERENCE.json``: the figures
    of an earlier scripts/eval_meeting.py run (its captions with their emission times, and its
    ``label_map``), both ways of showing an unnamed partial, as one JSON line."""
    import argparse
    import json
    from pathlib import Path

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("run")
    ap.add_argument("reference")
    args = ap.parse_args(argv)
    run = json.loads(Path(args.run).read_text())
    segments = json.loads(Path(args.reference).read_text())["segments"]
    rows = sorted(run["captions"], key=lambda r: r["seq"])
    events = [(row["emit_s"], caption_from(row)) for row in rows]
    out = {rule: partial_name_figures(events, segments, run["label_map"], rule)
           for rule in ("own_line", "previous")}  # fmt: skip
    print(json.dumps({"run": args.run, **out}))
    return 0


def caption_from(row: dict[str, Any]) -> Caption:
    """A caption of a run's JSON (its wire form) as a `Caption` (no words: not needed here)."""
    return Caption(row["type"], row.get("stream", ""), row["seq"], row["segment"], row["text"],
                   row["start"], row["end"], row.get("committed_chars", 0),
                   row.get("latency_ms", 0.0), speaker=row.get("speaker", ""))  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(main())
