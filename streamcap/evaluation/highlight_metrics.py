"""How far the overlay's lit word (`highlight=words`) is behind the voice (issue 37, item 6).
Pure: polls of the overlay and the reference word times in (`reference_words.RefWord`),
figures out; `highlight_lag` makes the polls in real Chromium.

A poll is what the page showed at one moment of the stream (``t``, seconds of stream time):
the lit word's text and the overlay's own time for it (``start``, from the event's word times
or the overlay's estimate), or no lit word.

- The *voice word* at ``t`` is the last reference word that started at or before ``t``. In a
  pause it is the last word said: a pause adds no lag.
- A lit word is matched to the reference word of the same spelling (`same_word`: lower case,
  punctuation dropped, or Whisper's normaliser, so "3" is "three") whose start is nearest the
  overlay's own time for it, within `MATCH_S`; none: *unmatched* (a misrecognised word).
- The *lag* of a poll with a matched lit word ``r`` and voice word ``v``: 0 when ``r == v``
  (the word being said is lit); when ``r`` is behind, the time since the voice left it
  (``t - start[r + 1]``); when ``r`` is ahead, how early (``t - start[r]``, negative).

Scored polls are those *in speech*: ``t`` from an utterance's first word's start to its last
word's end (reference). A speech poll with no lit word, or a lit word whose lag is over
`GOAL_S`, misses the goal.

Figures (`summarize`): ``speech_polls``; ``unlit`` and ``unmatched`` (fractions of them);
``lag_p50_s`` / ``lag_p95_s`` / ``lag_max_s`` over the matched ones; ``lag_all_p95_s`` with an
unlit poll counted as infinitely late (what a viewer meets: p95 <= 1 s is the goal);
``within_goal``: the fraction of speech polls lit with |lag| <= `GOAL_S`; ``early``: polls lit
more than `EARLY_S` before the word is said; ``first_lit_p50_s`` / ``_p95_s``: per reference
word ever lit, from its start to the first poll that lit it; ``words_lit``: the fraction of
reference words ever lit.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from streamcap.core.text import norm_word
from streamcap.evaluation.metrics import percentile
from streamcap.evaluation.reference_words import RefWord

__all__ = ["GOAL_S", "Poll", "lag_of", "match_word", "same_word", "summarize"]

#: Issue 37's goal: the lit word within this many seconds of the voice (p95).
GOAL_S = 1.0
#: A lit word matches a reference word whose start is at most this far from its own time.
MATCH_S = 2.5
#: Lit this much before the word is said counts as early.
EARLY_S = 0.3


@dataclass(frozen=True)
class Poll:
    """The overlay at stream time ``t``: the lit word and the overlay's time for it (both None
    when no word is lit)."""

    t: float
    word: str | None = None
    start: float | None = None


def same_word(a: str, b: str, norm: Callable[[str], str] | None = None) -> bool:
    """Whether two spellings are one word (case and punctuation aside; with ``norm``,
    Whisper's normaliser: "3" and "three")."""
    x, y = norm_word(a), norm_word(b)
    if x and x == y:
        return True
    return norm is not None and bool(norm(a).strip()) and norm(a).strip() == norm(b).strip()


def match_word(
    ref: Sequence[RefWord], word: str, start: float, norm: Callable[[str], str] | None = None
) -> int | None:
    """The index of the reference word spelt like ``word`` whose start is nearest ``start``
    (within `MATCH_S`), or None."""
    best: int | None = None
    lo = bisect.bisect_left([r.start for r in ref], start - MATCH_S)
    for i in range(lo, len(ref)):
        r = ref[i]
        if r.start > start + MATCH_S:
            break
        if same_word(r.word, word, norm) and (
            best is None or abs(r.start - start) < abs(ref[best].start - start)
        ):
            best = i
    return best


def lag_of(ref: Sequence[RefWord], lit: int, t: float) -> float:
    """The lag of lit reference word ``lit`` at stream time ``t`` (see the module)."""
    starts = [r.start for r in ref]
    voice = bisect.bisect_right(starts, t) - 1
    if lit == voice:
        return 0.0
    if lit < voice:
        return t - starts[lit + 1]
    return t - starts[lit]


def _rank_percentile(values: Sequence[float], q: float) -> float | None:
    """The nearest-rank ``q``-th percentile (defined with infinite values: an unlit poll)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def summarize(
    ref: Sequence[RefWord],
    polls: Sequence[Poll],
    norm: Callable[[str], str] | None = None,
    t_from: float = -math.inf,
    t_until: float = math.inf,
) -> dict[str, Any]:
    """The figures of the module's docstring over the polls from ``t_from`` to ``t_until``
    (an excerpt: only reference words that start in it count for ``words_lit``)."""
    spans: dict[int, tuple[float, float]] = {}
    for r in ref:
        a, b = spans.get(r.segment, (r.start, r.end))
        spans[r.segment] = (min(a, r.start), max(b, r.end))
    speech = [(a, b) for a, b in spans.values()]
    lags: list[float] = []
    all_lags: list[float] = []
    unlit = unmatched = early = within = 0
    first_lit: dict[int, float] = {}
    scored = 0
    for p in polls:
        if not (t_from <= p.t <= t_until):
            continue
        lit = None
        if p.word is not None and p.start is not None:
            lit = match_word(ref, p.word, p.start, norm)
            if lit is not None:
                first_lit.setdefault(lit, p.t)
        if not any(a <= p.t <= b for a, b in speech):
            continue
        scored += 1
        if p.word is None:
            unlit += 1
            all_lags.append(math.inf)
            continue
        if lit is None:
            unmatched += 1
            continue
        lag = lag_of(ref, lit, p.t)
        lags.append(lag)
        all_lags.append(lag)
        early += lag < -EARLY_S
        within += abs(lag) <= GOAL_S
    in_run = [i for i, r in enumerate(ref) if t_from <= r.start <= t_until]
    delays = [first_lit[i] - ref[i].start for i in in_run if i in first_lit]
    n = max(1, scored)
    return {
        "speech_polls": scored,
        "unlit": unlit / n,
        "unmatched": unmatched / n,
        "lag_p50_s": percentile(lags, 50),
        "lag_p95_s": percentile(lags, 95),
        "lag_max_s": max(lags, default=None),
        "lag_all_p95_s": _rank_percentile(all_lags, 95),
        "within_goal": within / n,
        "early": early / n,
        "first_lit_p50_s": percentile(delays, 50),
        "first_lit_p95_s": percentile(delays, 95),
        "words_lit": len(delays) / max(1, len(in_run)),
    }
