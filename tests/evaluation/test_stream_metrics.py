"""The stream metrics (`streamcap.evaluation.metrics`) on hand-made caption timelines.

No model and no clock: each test writes the captions a run would have emitted, with the times
they were emitted, against a reference it also writes, and checks a figure it can work out by
hand (docs/design.md, "Measurement"). The texts go through Whisper's real English normaliser.
"""

from __future__ import annotations

from typing import Any

import pytest

from streamcap.core.captions import Caption
from streamcap.evaluation.load_program import Segment
from streamcap.evaluation.load_report import final_latencies
from streamcap.evaluation.metrics import (
    align,
    align_finals,
    evaluate,
    first_shown,
    flicker,
    foreign_script_counts,
    percentile,
    reference_gaps,
    short_replies,
    wer,
)
from streamcap.evaluation.normalize import Normalizer, make_normalizer, words


@pytest.fixture(scope="module")
def norm() -> Normalizer:
    return make_normalizer()[0]


def cap(kind: str, segment: int, text: str, start: float, end: float) -> Caption:
    """A caption event as a sink numbers it (the sequence does not matter to the metrics)."""
    return Caption(kind, "eval", 0, segment, text, start, end, len(text), 0.0)  # type: ignore[arg-type]


def seg(start: float, end: float, text: str, **extra: Any) -> dict[str, Any]:
    return {"start": start, "end": end, "text": text, **extra}


def run_of(*events: tuple[float, Caption]) -> dict[str, Any]:
    return {"events": list(events)}


# --------------------------------------------------------------------------- final latency


def test_a_final_0_8_s_after_its_segment_ends_has_final_latency_0_8(norm: Normalizer) -> None:
    segments = [seg(0.5, 2.0, "Hello world.")]
    got = evaluate(run_of((2.8, cap("final", 0, "Hello world.", 0.4, 2.1))), segments, 4.0, norm)
    assert got["segments"][0]["final_latency"] == pytest.approx(0.8)
    assert got["final_latency_p50"] == pytest.approx(0.8)
    assert got["final_latency_p95"] == pytest.approx(0.8)
    assert got["missed_segments"] == 0
    assert got["stream_wer"] == 0.0


def test_final_latency_is_when_the_last_word_arrives_not_the_first(norm: Normalizer) -> None:
    """A segment's words split over two finals: its latency is the later final's."""
    segments = [seg(0.0, 3.0, "the quick brown fox")]
    run = run_of(
        (2.0, cap("final", 0, "The quick", 0.0, 1.5)),
        (3.6, cap("final", 1, "brown fox.", 1.5, 3.0)),
    )
    got = evaluate(run, segments, 5.0, norm)
    assert got["segments"][0]["final_latency"] == pytest.approx(0.6)


def test_a_lost_last_word_falls_back_to_the_latest_aligned_word(norm: Normalizer) -> None:
    segments = [seg(0.0, 2.5, "the quick brown fox"), seg(4.0, 5.0, "good night")]
    run = run_of((3.0, cap("final", 0, "The quick brown", 0.0, 2.4)))
    got = evaluate(run, segments, 6.0, norm)
    assert got["segments"][0]["final_latency"] == pytest.approx(0.5)
    assert got["segments"][1]["final_latency"] is None  # nothing of it: missed
    assert got["missed_segments"] == 1
    assert got["final_latency_p50"] == pytest.approx(0.5)  # over the segments a final reached


def test_the_load_test_measures_the_same_latency_on_a_viewers_wall_clock() -> None:
    """`load_report.final_latencies`: the same alignment, against the wall time the stream
    started (t0) instead of stream time 0."""
    segments = [Segment(0.5, 2.0, "Hello world."), Segment(3.0, 4.0, "good night")]
    finals = [(102.8, "Hello world."), (104.3, "Good night.")]
    timed, missed = final_latencies(segments, finals, t0=100.0)
    assert [(end, round(lat, 6)) for end, lat in timed] == [(2.0, 0.8), (4.0, 0.3)]
    assert missed == 0
    timed, missed = final_latencies(segments, finals[:1], t0=100.0)
    assert len(timed) == 1 and missed == 1


def test_finals_alignment_places_each_final_word(norm: Normalizer) -> None:
    found = align_finals(
        ["hello world", "good night"],
        [(1.0, "hello there world"), (2.0, "good night")],
        lambda t: words(norm, t),
    )
    assert found.ref_seg == [0, 0, 1, 1]
    assert found.hyp_final == [0, 0, 0, 1, 1]
    assert found.hyp_time == [1.0, 1.0, 1.0, 2.0, 2.0]
    assert found.inserted == [1]  # "there"
    assert found.final_latency(1, 1.5, t0=0.0) == pytest.approx(0.5)


def test_align_pairs_equal_and_substituted_words() -> None:
    ref_to_hyp, inserted, equal = align(["a", "b", "c"], ["a", "x", "c", "d"])
    assert ref_to_hyp == {0: 0, 1: 1, 2: 2}
    assert inserted == [3]
    assert equal == {0, 2}
    assert align([], ["a", "b"]) == ({}, [0, 1], set())
    assert align(["a"], []) == ({}, [], set())


# --------------------------------------------------------------------------- first partial


def test_first_partial_latency_counts_the_first_event_showing_a_word(norm: Normalizer) -> None:
    segments = [seg(1.0, 3.0, "hello world"), seg(5.0, 7.0, "good night")]
    run = run_of(
        (1.2, cap("partial", 0, "Mm", 1.0, 1.2)),  # no word of the segment: not shown yet
        (1.4, cap("partial", 0, "Hello", 1.0, 1.4)),
        (2.0, cap("partial", 0, "Hello world", 1.0, 2.0)),
        (3.5, cap("final", 0, "Hello world.", 1.0, 3.0)),
        (6.0, cap("final", 1, "Good night.", 5.0, 7.0)),
    )
    got = evaluate(run, segments, 8.0, norm)
    assert got["segments"][0]["first_partial_latency"] == pytest.approx(0.4)
    assert got["segments"][1]["first_partial_latency"] == pytest.approx(1.0)  # its final
    assert got["event_segments"] == [[], [0], [0], [0], [1]]


def test_an_event_shows_only_the_segments_near_its_audio(norm: Normalizer) -> None:
    """A word heard over one segment's audio that belongs to a segment 9 s later does not show
    the later one (else its first-partial latency would come before it was said)."""
    segments = [seg(0.0, 1.0, "good morning"), seg(10.0, 11.0, "hello")]
    first, shows = first_shown(
        [(1.5, cap("partial", 0, "hello", 0.0, 1.0))], segments, lambda t: words(norm, t)
    )
    assert first == {} and shows == [[]]
    first, shows = first_shown(
        [(11.5, cap("partial", 1, "hello", 10.0, 11.0))], segments, lambda t: words(norm, t)
    )
    assert first == {1: 11.5} and shows == [[1]]


# --------------------------------------------------------------------------- flicker


def test_a_partial_that_erases_5_chars_gives_that_flicker() -> None:
    """'hello world' on screen, then its final 'hello there': 'world' (5 chars) erased,
    per 100 characters of the final's 11."""
    events = [
        (1.0, cap("partial", 0, "hello world", 0.0, 1.0)),
        (2.0, cap("final", 0, "hello there", 0.0, 2.0)),
    ]
    assert flicker(events) == (pytest.approx(100 * 5 / 11), 5, 11)


def test_a_partial_that_only_grows_does_not_flicker() -> None:
    events = [
        (1.0, cap("partial", 0, "hello", 0.0, 1.0)),
        (1.5, cap("partial", 0, "hello world", 0.0, 1.5)),
        (2.0, cap("final", 0, "hello world", 0.0, 2.0)),
    ]
    assert flicker(events) == (0.0, 0, 11)


def test_events_emitted_together_are_one_update_of_the_screen() -> None:
    """A partial and the final replacing it in the same instant: the viewer never sees the
    shorter partial, so nothing is erased; a moment apart, its 2 characters are."""
    events = [
        (1.0, cap("partial", 0, "hello world", 0.0, 1.0)),
        (2.0, cap("partial", 0, "hello wor", 0.0, 2.0)),
        (2.0005, cap("final", 0, "hello world!", 0.0, 2.0)),
    ]
    assert flicker(events) == (0.0, 0, 12)
    apart = [events[0], events[1], (2.5, events[2][1])]
    assert flicker(apart) == (pytest.approx(100 * 2 / 12), 2, 12)


def test_flicker_without_finals_is_zero() -> None:
    assert flicker([]) == (0.0, 0, 0)
    assert flicker([(1.0, cap("partial", 0, "abc", 0.0, 1.0))]) == (0.0, 0, 0)


# --------------------------------------------------------------------------- hallucinations


def test_words_in_a_long_pause_are_hallucinated_words_per_minute_of_pause(
    norm: Normalizer,
) -> None:
    segments = [seg(0.0, 2.0, "hello world"), seg(10.0, 12.0, "good night")]
    run = run_of(
        (2.5, cap("final", 0, "Hello big world.", 0.0, 2.0)),  # "big": inside speech
        (6.5, cap("final", 1, "Thank you.", 5.0, 6.0)),  # inside the 8 s pause
        (12.5, cap("final", 2, "Good night.", 10.0, 12.0)),
    )
    got = evaluate(run, segments, 15.0, norm)
    gap_minutes = (8.0 + 3.0) / 60.0  # 2-10 s and 12-15 s
    assert got["gap_minutes"] == pytest.approx(gap_minutes)
    assert got["hallucinated_words"] == ["thank", "you"]
    assert got["hallucinated_words_per_min"] == pytest.approx(2 / gap_minutes)


def test_a_final_of_its_own_between_segments_across_a_pause_is_hallucinated(
    norm: Normalizer,
) -> None:
    """Its audio spans the speech either side (not inside the pause), but it stands alone
    between the two segments' finals, across an 8 s pause: its words were not said."""
    segments = [seg(0.0, 2.0, "hello world"), seg(10.0, 12.0, "good night")]
    run = run_of(
        (2.5, cap("final", 0, "Hello world.", 0.0, 2.0)),
        (9.0, cap("final", 1, "Thanks.", 1.5, 10.5)),
        (12.5, cap("final", 2, "Good night.", 10.0, 12.0)),
    )
    assert evaluate(run, segments, 12.0, norm)["hallucinated_words"] == ["thanks"]
    close = [seg(0.0, 2.0, "hello world"), seg(2.5, 4.0, "good night")]  # no long pause
    run = run_of(
        (2.5, cap("final", 0, "Hello world.", 0.0, 2.0)),
        (2.6, cap("final", 1, "Thanks.", 1.5, 2.6)),
        (4.5, cap("final", 2, "Good night.", 2.5, 4.0)),
    )
    assert evaluate(run, close, 4.0, norm)["hallucinated_words"] == []


def test_a_clip_without_reference_is_all_pause(norm: Normalizer) -> None:
    assert reference_gaps([], 30.0) == [(0.0, 30.0)]
    run = run_of((3.0, cap("final", 0, "Thank you for watching.", 1.0, 2.5)))
    got = evaluate(run, [], 30.0, norm)
    assert got["hallucinated_words"] == ["thank", "you", "for", "watching"]
    assert got["hallucinated_words_per_min"] == pytest.approx(4 / 0.5)
    assert got["stream_wer"] == 1.0  # any word where none was said


def test_short_pauses_are_not_gaps() -> None:
    segments = [seg(0.5, 2.0, "a"), seg(2.8, 4.0, "b")]
    assert reference_gaps(segments, 4.5) == []
    assert reference_gaps(segments, 6.0) == [(4.0, 6.0)]


# --------------------------------------------------------------------------- the rest


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [
        ([], 50, None),
        ([], 95, None),
        ([0.7], 50, 0.7),
        ([0.7], 95, 0.7),
        ([1.0, 2.0, 3.0, 4.0], 50, 2.5),
        ([1.0, 2.0, 3.0, 4.0], 95, 3.85),  # linear interpolation between the ranks
        ([4.0, 1.0, 3.0, 2.0], 0, 1.0),
        ([4.0, 1.0, 3.0, 2.0], 100, 4.0),
    ],
)
def test_percentile(values: list[float], q: float, expected: float | None) -> None:
    got = percentile(values, q)
    assert got == (pytest.approx(expected) if expected is not None else None)
    assert got is None or isinstance(got, float)


def test_wer_edge_cases() -> None:
    assert wer("hello world", "hello world") == 0.0
    assert wer("hello world", "hello there world") == pytest.approx(0.5)
    assert wer("hello world", "") == 1.0  # nothing captioned: every word missed
    assert wer("", "") == 0.0
    assert wer("", "thank you") == 1.0


def test_short_replies_are_found_in_the_finals_timed_words(norm: Normalizer) -> None:
    segments = [seg(1.0, 1.4, "Yes.", short=True), seg(5.0, 5.5, "No way.", short=True)]
    finals = [
        {"words": [{"word": " Yes,", "start": 1.05, "end": 1.3}]},
        {"words": [{"word": " No", "start": 5.0, "end": 5.2}]},
    ]
    got = short_replies(finals, segments, norm)
    assert (got["total"], got["captioned"]) == (2, 1)
    assert got["missed"] == [{"start": 5.0, "reference": "No way.", "heard": " No"}]


def test_foreign_script_counts_captions_with_other_letters() -> None:
    events = [
        (1.0, cap("partial", 0, "Привет", 0.0, 1.0)),
        (2.0, cap("final", 0, "Hello, naïve café", 0.0, 2.0)),
        (3.0, cap("final", 1, "שלום", 2.0, 3.0)),
    ]
    assert foreign_script_counts(events) == {"partial": 1, "final": 1}
    assert foreign_script_counts(events, "CYRILLIC") == {"partial": 0, "final": 2}
