"""Where to cut a window at committed words: word times of a decode, and the cut rule. Pure.

When the policy commits the first words of an utterance, the rest is decoded on its own audio,
from the cut on; cutting between words (by the decode's word times, `Engine.align`) is what
makes the two decodes lose and repeat nothing (tests/core/test_commits.py cuts real speech).
"""

from __future__ import annotations

from collections.abc import Sequence

from streamcap.core.decode_types import DecodeResult, WordTiming
from streamcap.core.text import norm_word


def timings_for(result: DecodeResult, words: list[str]) -> list[WordTiming] | None:
    """The word times of `words` (the guarded words of `result`: a prefix of its text's
    words), or None when the decode was not aligned or its words do not match."""
    timed = result.words
    if not words or len(timed) < len(words):
        return None
    if any(norm_word(t.word) != norm_word(w) for t, w in zip(timed, words, strict=False)):
        return None
    return list(timed[: len(words)])


def cut_after(timings: Sequence[WordTiming], j: int, duration: float) -> float:
    """Where to cut a window after its first `j` timed words (seconds into it): halfway into
    the silence before the next word, at most 0.2 s past the last word's end, or the end of
    the audio. The one rule of commits; tests cut real speech with it."""
    end = timings[j - 1].end
    nxt = timings[j].start if j < len(timings) else duration
    return min(max(end, (end + nxt) / 2), end + 0.2, duration)
