"""The lit-word figures of issue 37, item 6 (`evaluation.highlight_metrics`) on hand-made
polls, and the excerpt rule of `evaluation.highlight_lag`: pure, no browser or model."""

from __future__ import annotations

import math

import pytest

from streamcap.evaluation.highlight_lag import _excerpt
from streamcap.evaluation.highlight_metrics import (
    GOAL_S,
    Poll,
    lag_of,
    match_word,
    same_word,
    summarize,
)
from streamcap.evaluation.reference_words import RefWord, _bounds

# Two utterances: "Press three now." (1.0-2.2 s) and "Thank you." (5.0-5.8 s).
REF = [
    RefWord("Press", 1.0, 1.4, 0), RefWord("three", 1.4, 1.8, 0), RefWord("now.", 1.8, 2.2, 0),
    RefWord("Thank", 5.0, 5.4, 1), RefWord("you.", 5.4, 5.8, 1),
]  # fmt: skip


def three(text: str) -> str:
    """A stand-in for Whisper's normaliser: spelt-out three is 3."""
    return "3" if text.strip().lower().strip(".") in ("3", "three") else text.lower()


def test_same_word_ignores_case_and_punctuation_and_asks_the_normaliser() -> None:
    assert same_word("Now", "now.") and same_word("you.", "You")
    assert not same_word("3", "three") and same_word("3", "three", three)
    assert not same_word("now", "know", three)


def test_a_lit_word_matches_the_nearest_reference_word_of_its_spelling() -> None:
    ref = [*REF, RefWord("now", 3.0, 3.2, 2)]
    assert match_word(ref, "now", 2.1) == 2  # "now." at 1.8, not "now" at 3.0
    assert match_word(ref, "now", 2.9) == 5
    assert match_word(REF, "Thank", 1.0) is None  # 4 s away: another word
    assert match_word(REF, "3", 1.5, three) == 1 and match_word(REF, "3", 1.5) is None


def test_lag_is_how_long_the_voice_has_been_past_the_lit_word() -> None:
    assert lag_of(REF, 1, 1.5) == 0.0  # "three" lit while it is said
    assert lag_of(REF, 0, 1.5) == pytest.approx(0.1)  # "Press" lit; the voice left it at 1.4
    assert lag_of(REF, 2, 4.0) == 0.0  # a pause after "now.": nothing newer was said
    assert lag_of(REF, 2, 5.6) == pytest.approx(0.6)  # "Thank" began at 5.0
    assert lag_of(REF, 4, 5.1) == pytest.approx(-0.3)  # "you." lit before it is said


def test_figures_over_a_timeline() -> None:
    polls = [
        Poll(0.5),  # before any speech: not scored
        Poll(1.2),  # in speech, nothing lit: a miss, infinitely late
        Poll(1.6, "Press", 1.05),  # 0.2 s behind
        Poll(2.0, "three", 1.5),  # 0.2 s behind
        Poll(3.0, "now.", 1.9),  # in the pause: not scored
        Poll(5.2, "now.", 1.9),  # 0.2 s behind ("Thank" began at 5.0)
        Poll(5.3, "Banks", 5.1),  # a misrecognised word: unmatched
        Poll(5.6, "you.", 5.35),  # lit on time
    ]
    f = summarize(REF, polls)
    assert f["speech_polls"] == 6
    assert f["unlit"] == pytest.approx(1 / 6) and f["unmatched"] == pytest.approx(1 / 6)
    assert f["lag_p50_s"] == pytest.approx(0.2) and f["lag_max_s"] == pytest.approx(0.6 - 0.4)
    assert f["lag_all_p95_s"] == math.inf  # the unlit poll counts
    assert f["within_goal"] == pytest.approx(4 / 6) and f["early"] == 0
    # first lit: Press 0.6 s after it began, three 0.6, now. 1.2, you. 0.2; Thank never
    assert f["words_lit"] == pytest.approx(4 / 5)
    assert f["first_lit_p50_s"] == pytest.approx(0.6)
    late = summarize(REF, [Poll(2.1, "Press", 1.0)])
    assert late["lag_p95_s"] == pytest.approx(2.1 - 1.4) and late["within_goal"] == 1
    assert summarize(REF, [Poll(2.1, "Press", 1.0 + GOAL_S)])["within_goal"] == 1
    # an excerpt: only its polls and the words said in it
    part = summarize(REF, polls, t_from=4.0, t_until=6.0)
    assert part["speech_polls"] == 3 and part["words_lit"] == pytest.approx(1 / 2)


def test_excerpts_start_and_end_in_pauses() -> None:
    segments = [{"start": 1.0, "end": 2.2}, {"start": 5.0, "end": 5.8}, {"start": 7.0, "end": 9.0}]
    assert _excerpt(segments, 0.0, None, 10.0) == (0.0, 10.0)
    assert _excerpt(segments, 3.0, None, 10.0) == (pytest.approx(3.6), 10.0)  # mid-pause
    lo, hi = _excerpt(segments, 0.0, 6.0, 10.0)  # the third utterance would not fit
    assert lo == 0.0 and hi == pytest.approx(5.8 + 0.3)
    # reference alignment: each utterance with a margin, never past the middle of a gap
    assert _bounds(segments, 0, 10.0) == (pytest.approx(0.7), pytest.approx(2.5))
    assert _bounds(segments, 1, 10.0) == (pytest.approx(4.7), pytest.approx(6.1))
    assert _bounds([{"start": 0.1, "end": 1.0}, {"start": 1.2, "end": 2.0}], 0, 2.0) == (
        0.0, pytest.approx(1.1),
    )  # fmt: skip
