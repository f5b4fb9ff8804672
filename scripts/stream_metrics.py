"""The live pipeline's quality figures, from one run's timed caption events and a reference.

A sibling module of scripts/eval_stream.py (whose docstring defines each figure), apart from its
runs: scripts/eval_meeting.py computes the same figures on its own runs. Final latency is the
one definition shared with scripts/load_test.py (`reference_alignment`).
"""

from __future__ import annotations

import importlib.resources
import json
import unicodedata
from typing import Any

import jiwer
from reference_alignment import align, align_finals, percentile

from streamcap.core.captions import Caption

GAP_S = 1.0


def make_normalizer() -> tuple[Any, str]:
    """Whisper's English normaliser with its spelling map when one is installed."""
    from transformers.models.whisper.english_normalizer import EnglishTextNormalizer

    for pkg in ("whisper_normalizer", "whisper"):
        try:
            path = importlib.resources.files(pkg) / "normalizers" / "english.json"
            mapping = json.loads(path.read_text(encoding="utf-8"))
            return EnglishTextNormalizer(mapping), f"EnglishTextNormalizer ({pkg} english.json)"
        except (ModuleNotFoundError, FileNotFoundError, OSError):
            continue
    return EnglishTextNormalizer({}), "EnglishTextNormalizer (no spelling map installed)"


def foreign_script(text: str, script: str = "LATIN") -> bool:
    """True when ``text`` has a letter outside ``script`` (Unicode names: LATIN, CYRILLIC,
    HEBREW, THAI, ...): a caption in another language than the speech's."""
    return any(ch.isalpha() and not unicodedata.name(ch, "").startswith(script) for ch in text)


def foreign_script_counts(events: list[Any], script: str = "LATIN") -> dict[str, int]:
    """Partial and final events whose text has letters outside ``script``."""
    counts = {"partial": 0, "final": 0}
    for _, cap in events:
        if cap.type in counts and foreign_script(cap.text, script):
            counts[cap.type] += 1
    return counts


def short_replies(
    finals: list[dict[str, Any]], segments: list[dict[str, Any]], norm: Any, slack: float = 0.3
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
        got = set(_words(norm, heard))
        if all(w in got for w in _words(norm, seg["text"])):
            captioned += 1
        else:
            missed.append({"start": seg["start"], "reference": seg["text"], "heard": heard})
    return {"total": total, "captioned": captioned, "missed": missed}


def _words(norm: Any, text: str) -> list[str]:
    return norm(text).split() if text.strip() else []


def flicker(events: list[tuple[float, Caption]]) -> tuple[float, int, int]:
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


def evaluate(
    run: dict[str, Any],
    segments: list[dict[str, Any]],
    duration: float,
    norm: Any,
) -> dict[str, Any]:
    events: list[tuple[float, Caption]] = run["events"]
    finals = [(t, c) for t, c in events if c.type == "final" and c.text.strip()]
    found = align_finals(
        [s["text"] for s in segments], [(t, c.text) for t, c in finals], lambda t: _words(norm, t)
    )
    ref_seg, hyp_words, hyp_final = found.ref_seg, found.hyp_words, found.hyp_final
    ref_to_hyp, inserted = found.ref_to_hyp, found.inserted

    # final latency (`reference_alignment`: the one definition)
    per_seg: list[dict[str, Any]] = []
    for i, seg in enumerate(segments):
        row: dict[str, Any] = {"start": seg["start"], "end": seg["end"], "text": seg["text"]}
        row["final_latency"] = found.final_latency(i, seg["end"])
        per_seg.append(row)

    # first event showing a word of each segment: align each event's text to nearby segments
    first: dict[int, float] = {}
    shows: list[list[int]] = []  # per event: the segments it shows a word of
    for t, cap in events:
        words = _words(norm, cap.text)
        near = [
            i
            for i, s in enumerate(segments)
            if s["start"] < cap.end + 0.5 and s["end"] > cap.start - 0.5
        ]
        cand: list[str] = []
        cand_seg: list[int] = []
        for i in near:
            w = _words(norm, segments[i]["text"])
            cand += w
            cand_seg += [i] * len(w)
        _, _, equal = align(cand, words) if words and cand else ({}, [], set())
        shown = sorted({cand_seg[j] for j in equal})
        shows.append(shown)
        for i in shown:
            first.setdefault(i, t)
    for i, row in enumerate(per_seg):
        row["first_partial_latency"] = first[i] - segments[i]["start"] if i in first else None

    # hallucinations: inserted final words inside long reference gaps
    gaps: list[tuple[float, float]] = []
    prev_end = 0.0
    for seg in segments:
        if seg["start"] - prev_end > GAP_S:
            gaps.append((prev_end, seg["start"]))
        prev_end = max(prev_end, seg["end"])
    if duration - prev_end > GAP_S:
        gaps.append((prev_end, duration))
    gap_min = sum(b - a for a, b in gaps) / 60.0
    # An inserted final word is a hallucination when its caption's audio lies in a long gap,
    # or when it stands alone between two segments across a long gap (its own caption).
    hyp_to_ref = {h: r for r, h in ref_to_hyp.items()}
    halluc: list[str] = []
    for h in inserted:
        cap = finals[hyp_final[h]][1]
        in_gap = any(a - 0.1 <= cap.start and cap.end <= b + 0.1 for a, b in gaps)
        before = max((x for x in range(h) if x in hyp_to_ref), default=None)
        after = min((x for x in range(h + 1, len(hyp_words)) if x in hyp_to_ref), default=None)
        lone = (
            before is not None
            and after is not None
            and hyp_final[before] != hyp_final[h] != hyp_final[after]
            and segments[ref_seg[hyp_to_ref[after]]]["start"]
            - segments[ref_seg[hyp_to_ref[before]]]["end"]
            > GAP_S
        )
        if in_gap or lone:
            halluc.append(hyp_words[h])

    ref_text = norm(" ".join(s["text"] for s in segments))
    hyp_text = norm(" ".join(c.text for _, c in finals))
    fl, erased, final_chars = flicker(events)
    fin = [r["final_latency"] for r in per_seg if r["final_latency"] is not None]
    fp = [r["first_partial_latency"] for r in per_seg if r["first_partial_latency"] is not None]
    return {
        "final_latency_p50": percentile(fin, 50),
        "final_latency_p95": percentile(fin, 95),
        "first_partial_latency_p50": percentile(fp, 50),
        "first_partial_latency_p95": percentile(fp, 95),
        "missed_segments": sum(r["final_latency"] is None for r in per_seg),
        "stream_wer": _wer(ref_text, hyp_text),
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


def _wer(ref: str, hyp: str) -> float:
    if not ref.strip():
        return float(len(hyp.split()) > 0)
    return float(jiwer.wer(ref, hyp if hyp.strip() else "<empty>"))
