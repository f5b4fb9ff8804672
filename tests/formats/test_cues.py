"""The cue policy (`streamcap.cues`, `streamcap.cue_layout`) and the time formats: wrapping,
the fewest lines, cuts at sentence ends (the filling rules: tests/formats/test_cue_fill.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from captionkit import LONG

from streamcap.cue_layout import sentences, wrap_text
from streamcap.cues import split_cues
from streamcap.formats import (
    file_formats,
    format_of,
    format_srt_time,
    format_vtt_time,
)

# ----------------------------------------------------------------------------- formatting


@pytest.mark.parametrize(
    ("seconds", "srt", "vtt"),
    [
        (0.0, "00:00:00,000", "00:00:00.000"),
        (62.345, "00:01:02,345", "00:01:02.345"),
        (3723.0004, "01:02:03,000", "01:02:03.000"),
        (59.9996, "00:01:00,000", "00:01:00.000"),  # rounding carries into the minute
        (-0.5, "00:00:00,000", "00:00:00.000"),
        (360000.0, "100:00:00,000", "100:00:00.000"),
    ],
)
def test_time_formats(seconds: float, srt: str, vtt: str) -> None:
    assert format_srt_time(seconds) == srt
    assert format_vtt_time(seconds) == vtt


def test_wrap_text_word_boundaries_and_long_words() -> None:
    lines = wrap_text(LONG)
    assert all(len(x) <= 42 for x in lines)
    assert " ".join(lines) == LONG
    assert wrap_text("  a   b  ") == ["a b"]
    assert wrap_text("") == []
    url = "x" * 100  # a word is never split: one too long for a line stands alone on it
    assert wrap_text(f"see {url} now", 42) == ["see", url, "now"]
    assert wrap_text("z" * 84 + " end") == ["z" * 84, "end"]


def test_split_cues_short_text_is_one_balanced_cue() -> None:
    text = "Hello there, this is a sentence of about fifty chars."
    [(t0, t1, lines)] = split_cues(text, 1.0, 3.0)
    assert (t0, t1) == (1.0, 3.0)
    assert lines == ["Hello there, this is a", "sentence of about fifty chars."]
    # end before start: a cue of the files' millisecond, never none
    assert split_cues("one", 2.0, 1.0) == [(2.0, 2.001, ["one"])]
    assert split_cues("   ", 0.0, 1.0) == []


def test_split_cues_long_text_spreads_over_span() -> None:
    cues = split_cues(LONG, 10.0, 20.0)
    assert len(cues) == 2
    assert cues[0][0] == 10.0 and cues[-1][1] == 20.0
    assert cues[0][1] == cues[1][0]  # contiguous
    assert 13.0 < cues[0][1] < 17.0  # roughly proportional to characters
    for _, _, lines in cues:
        assert 1 <= len(lines) <= 2 and all(len(x) <= 42 for x in lines)
    assert " ".join(" ".join(lines) for _, _, lines in cues) == LONG


def test_split_cues_uses_the_fewest_lines_and_never_splits_a_word() -> None:
    assert split_cues("y" * 100, 0.0, 1.0) == [(0.0, 1.0, ["y" * 100])]  # one word, one line
    text = " ".join("x" * n for n in [35, 10, 5, 20, 3, 40, 3, 1, 1])
    cues = split_cues(text, 0.0, 5.0)
    lines = [x for _, _, cue in cues for x in cue]
    assert len(lines) == len(wrap_text(text)) == 4  # as few as greedy filling gives
    assert " ".join(lines) == text and all(len(x) <= 42 for x in lines)
    assert [len(x.split()) for x in lines] == [1, 4, 1, 3]  # the 35 and the 40 fit nothing else
    assert cues[-1][1] == 5.0


def test_sentences_cut_at_sentence_ends_only() -> None:
    text = (
        'Hello Mr. Smith, this is J. K. Rowling. Really? "Yes!" e.g. this. The U.S. is big... Go.'
    )
    assert sentences(text) == [
        "Hello Mr. Smith, this is J. K. Rowling.",
        "Really?",
        '"Yes!" e.g. this.',
        "The U.S. is big...",
        "Go.",
    ]
    assert sentences("  no end at all ") == ["no end at all"]
    assert sentences("") == []


def test_split_cues_prefers_sentence_ends_where_they_cost_no_line() -> None:
    text = (
        "It was late. We walked home through the rain and the cold wind, talking about "
        "nothing. Then we slept."
    )
    cues = split_cues(text, 0.0, 10.0)
    # a cue per sentence took 4 lines where 3 hold the text: fewest lines, cut at the clause
    assert [" ".join(lines) for _, _, lines in cues] == [
        "It was late. We walked home through the rain and the cold wind,",
        "talking about nothing. Then we slept.",
    ]
    two = "Bobby ripped the ledger. Please leave your message after the tone."
    assert split_cues(two, 0.0, 4.0)[0][2] == [
        "Bobby ripped the ledger.",
        "Please leave your message after the tone.",
    ]  # two lines either way: the break at the sentence end
    assert [c[0] for c in cues][1:] == [c[1] for c in cues][:-1] and cues[-1][1] == 10.0
    for _, _, lines in cues:
        assert len(lines) <= 2 and all(len(x) <= 42 for x in lines)


def test_split_cues_packs_short_sentences_and_fills_the_lines() -> None:
    short = "Yes. No. Maybe so."
    long = "Then " + " ".join(["word"] * 40) + "."
    text = f"{short} {long} Done."
    cues = split_cues(text, 0.0, 30.0)
    texts = [" ".join(lines) for _, _, lines in cues]
    assert " ".join(texts) == text
    assert sum(len(lines) for _, _, lines in cues) == len(wrap_text(text))  # the fewest lines
    assert texts[-1].endswith("word. Done.")  # no lone "Done." cue
    for _, _, lines in cues:
        assert len(lines) <= 2 and all(len(x) <= 42 for x in lines)


def test_formats_and_format_of() -> None:
    assert file_formats() == ("srt", "vtt", "jsonl", "txt", "json", "md", "tsv")
    assert format_of("a.SRT") == "srt" and format_of(Path("x/b.jsonl")) == "jsonl"
    assert format_of("a.doc") is None and format_of("captions") is None


def test_a_long_word_wraps_in_linear_time() -> None:
    """Issue 35 (red team 2026-12-05, CORRUPT-longline): `wrap_text` sliced the rest of a long
    word once per line, quadratic in its length: one 2 MB word in a recording took 8.3 s to
    render. Timed against itself in the same run (no absolute time): four times the word
    must take about four times as long, not sixteen (the best of three runs each)."""
    import time

    def best(n: int) -> float:
        word = "x" * n
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            cues = split_cues(f"see {word} end", 0.0, 10.0)
            times.append(time.perf_counter() - t0)
        assert sum(len(x.replace(" ", "")) for _, _, lines in cues for x in lines) == n + 6
        return min(times)

    small, large = best(250_000), best(1_000_000)
    assert large / small < 8, f"{small:.3f} s, then {large:.3f} s for 4x the word"
    assert wrap_text("x" * 100 + " y", 42) == ["x" * 100, "y"]
