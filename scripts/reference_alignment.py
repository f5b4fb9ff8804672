"""Captions against a reference: the word alignment, and the one definition of final latency.

A sibling module of the measurement scripts (scripts/eval_stream.py on the live pipeline in one
process, scripts/load_test.py on the real server over its sockets), so that both measure the
same thing: each reference segment's final latency is the time its last word first arrives in
a final (the final's word aligned to it by jiwer, after the script's normaliser), otherwise the
latest final word aligned to the segment, minus the segment's end; a segment with no aligned
word is missed. Only the times differ: the stream's clock there, a viewer's wall clock here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


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
    segments: list[str], finals: list[tuple[float, str]], words: Callable[[str], list[str]]
) -> FinalsAlignment:
    """The reference segments' texts against the finals, ``(time, text)`` in arrival order,
    both split into normalised words by ``words``."""
    ref_words: list[str] = []
    ref_seg: list[int] = []
    for i, text in enumerate(segments):
        w = words(text)
        ref_words += w
        ref_seg += [i] * len(w)
    hyp_words: list[str] = []
    hyp_time: list[float] = []
    hyp_final: list[int] = []
    for k, (t, text) in enumerate(finals):
        w = words(text)
        hyp_words += w
        hyp_time += [t] * len(w)
        hyp_final += [k] * len(w)
    ref_to_hyp, inserted, _ = align(ref_words, hyp_words)
    return FinalsAlignment(ref_words, ref_seg, hyp_words, hyp_time, hyp_final, ref_to_hyp, inserted)


def percentile(values: list[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None
