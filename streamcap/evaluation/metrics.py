"""The stream metrics, defined once: a caption timeline against reference segments.

docs/design.md ("Measurement") names each figure; this module is where each is computed, for
every script that reports it: `evaluate` for a live run in one process
(scripts/eval_stream.py, scripts/eval_meeting.py), `FinalsAlignment.final_latency` also for
the real server over its sockets (`load_report.final_latencies`, scripts/load_test.py), so
both measure the same thing on their own clocks (the stream's there, a viewer's wall clock
here).

Reference files give utterance segments (``start``, ``end``, ``text``) and no word times, so
captions are placed by aligning words (jiwer's alignment, after the normaliser of
`normalize`):

- final latency: per segment, the time its last word first arrives in a final (the final's
  word aligned to it), else the latest final word aligned to the segment, minus the segment's
  end; a segment with no aligned word is missed;
- first-partial latency: per segment, the first event (partial or final) showing a word equal
  to one of the segment's, minus the segment's start;
- flicker: characters erased from the screen per 100 characters of final text;
- hallucinated words: final words aligned to no reference word that fall in a reference gap
  longer than `GAP_S`, per minute of such gaps.

Pure: a timeline is ``(emit time, Caption)`` pairs, the normaliser is passed in.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from streamcap.core.captions import Caption
from streamcap.evaluation.normalize import Normalizer, words

__all__ = [
    "FinalsAlignment",
    "align_finals",
    "evaluate",
    "first_shown",
    "flicker",
    "hallucinated_words",
    "percentile",
    "wer",
]

#: A reference gap longer than this (seconds) is a pause where captions would be hallucinated.
GAP_S = 1.0

#: Caption events with the time each was emitted (seconds on the run's clock).
Timeline = list[tuple[float, Caption]]
Segments = list[dict[str, Any]]


def percentile(values: list[float], q: float) -> float | None:
    """The ``q``-th percentile (numpy's linear interpolation); None for no values."""
    return float(np.percentile(values, q)) if values else None


def wer(ref: str, hyp: str) -> float:
    """jiwer's WER of normalised texts; an empty reference scores 1 for any word, else 0."""
    import jiwer

    if not ref.strip():
        return float(len(hyp.split()) > 0)
    return float(jiwer.wer(ref, hyp if hyp.strip() else "<empty>"))


# --------------------------------------------------------------------------- alignment


def align(ref: list[str], hyp: list[str]) -> tuple[dict[int, int], list[int], set[int]]:
    """(ref index -> hyp index for equal/substituted words, inserted hyp indices, equal refs)."""
    import jiwer

    ref_to_hyp: dict[int, int] = {}
    inserted: list[int] = []
    equal: set[int] = set()
    if not hyp:
        return ref_to_hyp, inserted, equal
    if not ref:
        return ref_to_hyp, list(range(len(hyp))), equal
    out = jiwer.process_words(" ".join(ref), " ".join(hyp))
    for chunk in out.alignments[0]:
        if chunk.type in ("equal", "substitute"):
            for k in range(chunk.ref_end_idx - chunk.ref_start_idx):
                ref_to_hyp[chunk.ref_start_idx + k] = chunk.hyp_start_idx + k
                if chunk.type == "equal":
                    equal.add(chunk.ref_start_idx + k)
        elif chunk.type == "insert":
            inserted.extend(range(chunk.hyp_start_idx, chunk.hyp_end_idx))
    return ref_to_hyp, inserted, equal


@dataclass
class FinalsAlignment:
    """The reference's words aligned to the finals' words, each word with where it came from."""

    ref_words: list[str]
    ref_seg: list[int]  # per reference word: its segment
    hyp_words: list[str]
    hyp_time: list[float]  # per final word: when its final arrived
    hyp_final: list[int]  # per final word: its final
    ref_to_hyp: dict[int, int]
    inserted: list[int]  # final words aligned to no reference word

    def final_latency(self, segment: int, end: float, t0: float = 0.0) -> float | None:
        """When the segment's last word first arrived in a final (see the module docstring),
        minus ``t0 + end`` (its end, on the finals' clock); None: missed."""
        idx = [j for j, s in enumerate(self.ref_seg) if s == segment]
        if not idx:
            return None
        if idx[-1] in self.ref_to_hyp:
            return self.hyp_time[self.ref_to_hyp[idx[-1]]] - (t0 + end)
        aligned = [self.hyp_time[self.ref_to_hyp[j]] for j in idx if j in self.ref_to_hyp]
        return max(aligned) - (t0 + end) if aligned else None


def align_finals(
    segments: list[str], finals: list[tuple[float, str]], words_of: Callable[[str], list[str]]
) -> FinalsAlignment:
    """The reference segments' texts against the finals, ``(time, text)`` in arrival order,
    both split into normalised words by ``words_of``."""
    ref_words: list[str] = []
    ref_seg: list[int] = []
    for i, text in enumerate(segments):
        w = words_of(text)
        ref_words += w
        ref_seg += [i] * len(w)
    hyp_words: list[str] = []
    hyp_time: list[float] = []
    hyp_final: list[int] = []
    for k, (t, text) in enumerate(finals):
        w = words_of(text)
        hyp_words += w
        hyp_time += [t] * len(w)
        hyp_final += [k] * len(w)
    ref_to_hyp, inserted, _ = align(ref_words, hyp_words)
    return FinalsAlignment(ref_words, ref_seg, hyp_words, hyp_time, hyp_final, ref_to_hyp, inserted)


# --------------------------------------------------------------------------- figures


def flicker(events: Timeline) -> tuple[float, int, int]:
    """(erased chars per 100 final chars, erased, final chars); simultaneous events = 1 update."""
    finals: dict[int, str] = {}
    partials: dict[int, str] = {}

    def screen() -> str:
        parts = {**partials, **finals}
        return " ".join(t for _, t in sorted(parts.items()) if t)

    erased = 0
    shown = screen()
    i = 0
    while i < len(events):
        t = events[i][0]
        while i < len(events) and events[i][0] - t < 1e-3:
            cap = events[i][1]
            if cap.type == "final":
                finals[cap.segment] = cap.text
                partials.pop(cap.segment, None)
            else:
                partials[cap.segment] = cap.text
            i += 1
        new = screen()
        lcp = 0
        while lcp < min(len(shown), len(new)) and shown[lcp] == new[lcp]:
            lcp += 1
        erased += len(shown) - lcp
        shown = new
    total = len(" ".join(t for t in finals.values() if t))
    return (100.0 * erased / total if total else 0.0), erased, total


def first_shown(
    events: Timeline, segments: Segments, words_of: Callable[[str], list[str]]
) -> tuple[dict[int, float], list[list[int]]]:
    """When a word of each segment was first on screen (segment -> emit time), and per event
    the segments it shows a word of: each event's words aligned to the words of the segments
    within 0.5 s of its audio, a word counting when it equals the segment's."""
    first: dict[int, float] = {}
    shows: list[list[int]] = []
    for t, cap in events:
        heard = words_of(cap.text)
        near = [
            i
            for i, s in enumerate(segments)
            if s["start"] < cap.end + 0.5 and s["end"] > cap.start - 0.5
        ]
        cand: list[str] = []
        cand_seg: list[int] = []
        for i in near:
            w = words_of(segments[i]["text"])
            cand += w
            cand_seg += [i] * len(w)
        equal = align(cand, heard)[2] if heard and cand else set()
        shown = sorted({cand_seg[j] for j in equal})
        shows.append(shown)
        for i in shown:
            first.setdefault(i, t)
    return first, shows


def reference_gaps(segments: Segments, duration: float) -> list[tuple[float, float]]:
    """The pauses longer than `GAP_S` between reference segments (and before the first, after
    the last up to ``duration``); no segment: the whole clip."""
    gaps: list[tuple[float, float]] = []
    prev_end = 0.0
    for seg in segments:
        if seg["start"] - prev_end > GAP_S:
            gaps.append((prev_end, seg["start"]))
        prev_end = max(prev_end, seg["end"])
    if duration - prev_end > GAP_S:
        gaps.append((prev_end, duration))
    return gaps


def hallucinated_words(
    found: FinalsAlignment, finals: Timeline, segments: Segments, gaps: list[tuple[float, float]]
) -> list[str]:
    """Final words aligned to no reference word whose caption's audio lies in a long gap
    (± 0.1 s), or that stand alone between two segments across a long gap (their own final)."""
    hyp_final = found.hyp_final
    hyp_to_ref = {h: r for r, h in found.ref_to_hyp.items()}
    out: list[str] = []
    for h in found.inserted:
        cap = finals[hyp_final[h]][1]
        in_gap = any(a - 0.1 <= cap.start and cap.end <= b + 0.1 for a, b in gaps)
        before = max((x for x in range(h) if x in hyp_to_ref), default=None)
        after = min(
            (x for x in range(h + 1, len(found.hyp_words)) if x in hyp_to_ref), default=None
        )
        lone = (
            before is not None
            and after is not None
            and hyp_final[before] != hyp_final[h] != hyp_final[after]
            and segments[found.ref_seg[hyp_to_ref[after]]]["start"]
            - segments[found.ref_seg[hyp_to_ref[before]]]["end"]
            > GAP_S
        )
        if in_gap or lone:
            out.append(found.hyp_words[h])
    return out


def evaluate(
    run: dict[str, Any], segments: Segments, duration: float, norm: Normalizer
) -> dict[str, Any]:
    """Every figure of a run (``run["events"]``: its timeline) against the reference
    ``segments`` of a ``duration``-second file: the module docstring's figures, per segment
    (``segments``), and per event the segments it shows (``event_segments``, for the plot)."""
    events: Timeline = run["events"]

    def words_of(text: str) -> list[str]:
        return words(norm, text)

    finals = [(t, c) for t, c in events if c.type == "final" and c.text.strip()]
    found = align_finals([s["text"] for s in segments], [(t, c.text) for t, c in finals], words_of)
    first, shows = first_shown(events, segments, words_of)
    per_seg: list[dict[str, Any]] = []
    for i, seg in enumerate(segments):
        row: dict[str, Any] = {"start": seg["start"], "end": seg["end"], "text": seg["text"]}
        row["final_latency"] = found.final_latency(i, seg["end"])
        row["first_partial_latency"] = first[i] - seg["start"] if i in first else None
        per_seg.append(row)
    gaps = reference_gaps(segments, duration)
    gap_min = sum(b - a for a, b in gaps) / 60.0
    halluc = hallucinated_words(found, finals, segments, gaps)
    ref_text = norm(" ".join(s["text"] for s in segments))
    hyp_text = norm(" ".join(c.text for _, c in finals))
    fl, erased, final_chars = flicker(events)
    fin = [r["final_latency"] for r in per_seg if r["final_latency"] is not None]
    fp = [r["first_partial_latency"] for r in per_seg if r["first_partial_latency"] is not None]
    return {
        "final_latency_p50": percentile(fin, 50),
        "final_latency_p95": percentile(fin, 95),
        "final_latency_max": max(fin) if fin else None,
        # a backlog that grows shows at the end: the worst final of the file's last third
        "final_latency_max_last_third": max(
            (
                r["final_latency"]
                for r in per_seg
                if r["final_latency"] is not None and r["end"] >= duration * 2 / 3
            ),
            default=None,
        ),  # fmt: skip
        "first_partial_latency_p50": percentile(fp, 50),
        "first_partial_latency_p95": percentile(fp, 95),
        "missed_segments": sum(r["final_latency"] is None for r in per_seg),
        "stream_wer": wer(ref_text, hyp_text),
        "flicker": fl,
        "erased_chars": erased,
        "final_chars": final_chars,
        "hallucinated_words_per_min": (len(halluc) / gap_min) if gap_min > 0 else 0.0,
        "hallucinated_words": halluc,
        "gap_minutes": gap_min,
        "segments": per_seg,
        "event_segments": shows,
        "stream_text": " ".join(c.text for _, c in finals),
    }


# --------------------------------------------------------------------------- screen checks


def foreign_script(text: str, script: str = "LATIN") -> bool:
    """True when ``text`` has a letter outside ``script`` (Unicode names: LATIN, CYRILLIC,
    HEBREW, THAI, ...): a caption in another language than the speech's."""
    return any(ch.isalpha() and not unicodedata.name(ch, "").startswith(script) for ch in text)


def foreign_script_counts(events: Timeline, script: str = "LATIN") -> dict[str, int]:
    """Partial and final events whose text has letters outside ``script``."""
    counts = {"partial": 0, "final": 0}
    for _, cap in events:
        if cap.type in counts and foreign_script(cap.text, script):
            counts[cap.type] += 1
    return counts


def short_replies(
    finals: list[dict[str, Any]], segments: Segments, norm: Normalizer, slack: float = 0.3
) -> dict[str, Any]:
    """Reference segments marked ``"short": true`` (a reply of 1-3 words between sentences):
    how many have all their words in the finals' words timed within the segment (± `slack`
    seconds), and the ones that do not, with what was heard there."""
    total = captioned = 0
    missed = []
    for seg in segments:
        if not seg.get("short"):
            continue
        total += 1
        heard = " ".join(
            w["word"]
            for c in finals
            for w in c.get("words") or []
            if w["end"] > seg["start"] - slack and w["start"] < seg["end"] + slack
        )
        got = set(words(norm, heard))
        if all(w in got for w in words(norm, seg["text"])):
            captioned += 1
        else:
            missed.append({"start": seg["start"], "reference": seg["text"], "heard": heard})
    return {"total": total, "captioned": captioned, "missed": missed}
