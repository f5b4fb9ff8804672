"""Where a final splits when the voice changes inside it (`change_point`), and the sentences
that are a label decision's unit (`sentence_spans`). Pure (numpy only); beside the tracker
(`core.speakers`), whose calibrated thresholds (`SpeakerConfig`) it reads; used by the
labeller (`runtime.labeller.SpeakerLabeller`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from streamcap.core.decode_types import WordTiming
from streamcap.core.speakers import Matrix, SpeakerConfig, unit
from streamcap.core.text import ends_sentence

__all__ = ["ChangePoint", "change_point", "sentence_spans", "side_windows"]


@dataclass(frozen=True)
class ChangePoint:
    """A final's voice changes before word ``index`` (0 < index < words); ``similarity`` of
    the windows' mean embeddings before and after the boundary at ``time`` (stream seconds)."""

    index: int
    time: float
    similarity: float


def side_windows(
    starts: Sequence[float] | npt.NDArray[np.float64],
    window_s: float,
    boundary: float,
    tolerance: float,
) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]]:
    """Masks of the windows ``[start, start + window_s]`` that lie before ``boundary`` and
    after it, each allowed to reach ``tolerance`` seconds across."""
    s = np.asarray(starts, dtype=np.float64)
    return s + window_s <= boundary + tolerance, s >= boundary - tolerance


def change_point(
    words: Sequence[WordTiming],
    starts: Sequence[float] | npt.NDArray[np.float64],
    embeddings: Matrix,
    window_s: float,
    config: SpeakerConfig,
    tolerance: float = 0.25,
) -> ChangePoint | None:
    """The word boundary where the voice changes most inside ``words`` (one final's, stream
    seconds), or None: windows ``embeddings[i]`` cover ``[starts[i], starts[i] + window_s]``
    (stream seconds). Each side needs `min_piece_s` of speech and at least one window; the
    means of the two sides must be less similar than `split_threshold`."""
    best: ChangePoint | None = None
    if len(words) < 2 or len(embeddings) < 2:
        return None
    first, last = words[0].start, words[-1].end
    for k in range(1, len(words)):
        left_s = words[k - 1].end - first
        right_s = last - words[k].start
        if left_s < config.min_piece_s or right_s < config.min_piece_s:
            continue
        boundary = (words[k - 1].end + words[k].start) / 2
        left, right = side_windows(starts, window_s, boundary, tolerance)
        if not left.any() or not right.any():
            continue
        sim = float(unit(embeddings[left].mean(axis=0)) @ unit(embeddings[right].mean(axis=0)))
        if best is None or sim < best.similarity:
            best = ChangePoint(k, boundary, sim)
    if best is None or best.similarity >= config.split_threshold:
        return None
    return best


def sentence_spans(words: Sequence[WordTiming]) -> list[tuple[int, int]]:
    """``[a, b)`` word ranges of the sentences in a final's words (`core.text.ends_sentence`,
    the rule by which the live policy commits a sentence as a final of its own). The unit of
    a label decision is a sentence: a live final is mostly one already, an offline final (a
    whole VAD utterance) may hold several turns, each of which the live path labelled as a
    final (issue 37: offline merged lf3's 1.2 s "Bobby ripped the ledger." into the next
    speaker's final, where live, a final of its own, founded a speaker)."""
    spans: list[tuple[int, int]] = []
    a = 0
    for i, w in enumerate(words):
        nxt = words[i + 1].word.strip() if i + 1 < len(words) else None
        if i + 1 < len(words) and ends_sentence(w.word.strip(), nxt):
            spans.append((a, i + 1))
            a = i + 1
    if a < len(words):
        spans.append((a, len(words)))
    return spans
