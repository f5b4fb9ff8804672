"""Issue 39, item 5: cues filled to the width (`streamcap.cue_layout`), never a split word or
a zero-length cue, ``--max-words-per-line``, whisper's TSV and JSON segment bounds. Pure: the
captions are made by hand; the files are read back by the `srt`, `webvtt-py` and (when
installed) `pysubs2` parsers."""

from __future__ import annotations

import dataclasses
import io
import math

import pytest
import srt
import webvtt
from captionkit import LONG, cap
from hypothesis import given, settings
from hypothesis import strategies as st

from streamcap.core.captions import Caption
from streamcap.core.decode_types import WordTiming
from streamcap.cue_layout import layout_cues, wrap_text
from streamcap.cues import CueStyle, ms, split_cues
from streamcap.formats.base import Decoded, spoken_span
from streamcap.formats.subtitles import SrtWriter, VttWriter
from streamcap.formats.tsv import TsvWriter, render_tsv
from streamcap.formats.whisper_json import WhisperJsonWriter

JFK = (
    "And so my fellow Americans, ask not what your country can do for you, ask what you can "
    "do for your country."
)


def timed(text: str, start: float, end: float, step: float = 0.3) -> Caption:
    """A final whose words are said one after another from `start`, `step` apart."""
    words = tuple(
        WordTiming(f" {w}", start + i * step, start + i * step + step * 0.8, 0.9)
        for i, w in enumerate(text.split())
    )
    return dataclasses.replace(cap(text=text, start=start, end=end), words=words)


def lines_of(cues: list[list[str]]) -> list[str]:
    return [x for cue in cues for x in cue]


# ----------------------------------------------------------------------------- filling


@pytest.mark.parametrize("width", [12, 20, 30, 42])
@pytest.mark.parametrize("text", [LONG, JFK])
def test_the_fewest_lines_whole_words_within_the_width(text: str, width: int) -> None:
    for max_lines in (1, 2, 3):
        cues = layout_cues(text, width, max_lines)
        lines = lines_of(cues)
        assert " ".join(lines) == text  # every word, in order, none split
        assert len(lines) == len(wrap_text(text, width))  # as few lines as filling gives
        assert all(len(x) <= width for x in lines)
        assert all(1 <= len(c) <= max_lines for c in cues)


def test_the_issues_examples_fill_and_have_no_orphan() -> None:
    # Was: four cues of two evened lines, 27 characters a line on average
    dashwood = (
        "And Mr. John Dashwood had then leisure to consider how much there might be "
        "prudently in his power to do for them."
    )
    cues = layout_cues(dashwood)
    assert [len(c) for c in cues] == [2, 1]
    assert sum(map(len, lines_of(cues))) / 3 == 37  # was 111 / 4 lines
    # a cue break at the clause, the last cue a whole clause (no "you." left over)
    assert layout_cues(JFK) == [
        ["And so my fellow Americans, ask not", "what your country can do for you,"],
        ["ask what you can do for your country."],
    ]


def test_no_lone_word_where_as_many_lines_avoid_it() -> None:
    text = "That feature is not available on this line."  # 43 characters: two lines
    [lines] = layout_cues(text)
    assert len(lines) == 2 and all(len(x.split()) > 1 for x in lines)
    # a final that is one word stays one word, and a word longer than the line has its own
    assert layout_cues("29340.") == [["29340."]]
    assert lines_of(layout_cues("see " + "x" * 50 + " now", 42)) == ["see", "x" * 50, "now"]


def test_max_words_per_line() -> None:
    cues = layout_cues(JFK, 42, 2, max_words=3)
    lines = lines_of(cues)
    assert all(len(x.split()) <= 3 for x in lines) and " ".join(lines) == JFK
    assert len(lines) == math.ceil(len(JFK.split()) / 3)  # three a line, as few lines as that
    buf = io.StringIO()
    SrtWriter(buf, CueStyle(words=4, lines=1)).write(timed(JFK, 0.0, 7.0))
    subs = list(srt.parse(buf.getvalue()))
    assert all(len(s.content.split()) <= 4 and "\n" not in s.content for s in subs)
    with pytest.raises(ValueError, match=">= 1"):
        CueStyle(words=0)


def test_a_huge_final_is_laid_out_greedily_and_fast() -> None:
    """A damaged recording may hold a final of 100 000 words: no search over it."""
    text = " ".join(["word"] * 100_000)
    cues = layout_cues(text, 42, 2)
    assert len(lines_of(cues)) == len(wrap_text(text, 42))


# ----------------------------------------------------------------------------- timing


def test_max_line_width_5_splits_no_word_and_writes_no_empty_cue() -> None:
    """The issue's case: ``--max-line-width 5`` cut words and wrote zero-length cues."""
    final = timed(JFK, 0.0, 11.0, step=0.2)
    # words on top of each other, as a fast stretch's times may be
    squeezed = dataclasses.replace(
        final, words=tuple(dataclasses.replace(w, start=5.0, end=5.0) for w in final.words)
    )
    for c in (final, squeezed):
        for highlight in (False, True):
            buf = io.StringIO()
            SrtWriter(buf, CueStyle(width=5, lines=1, highlight=highlight)).write(c)
            subs = list(srt.parse(buf.getvalue()))
            assert all(s.end > s.start for s in subs), buf.getvalue()
            plain = [s.content.replace("<u>", "").replace("</u>", "") for s in subs]
            assert set(" ".join(plain).split()) <= set(JFK.split())  # whole words only
            if not highlight:
                assert " ".join(plain) == JFK


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.sampled_from(["a", "bb", "word", "Americans,", "x" * 9, "end."]), min_size=1,
             max_size=30),
    st.integers(1, 12),
    st.integers(1, 3),
    st.floats(0, 5),
    st.floats(0, 0.05),
)  # fmt: skip
def test_no_cue_is_empty_whatever_the_times(
    words: list[str], width: int, lines: int, start: float, span: float
) -> None:
    text = " ".join(words)
    for timing in ((), timed(text, start, start + span, step=span / len(words)).words):
        cues = split_cues(text, start, start + span, width, lines, timing)
        assert all(ms(t1) > ms(t0) for t0, t1, _ in cues)
        assert all(ms(a1) <= ms(b0) for (_, a1, _), (b0, _, _) in zip(cues, cues[1:], strict=False))
        assert " ".join(x for _, _, c in cues for x in c) == text


# ----------------------------------------------------------------------------- TSV, JSON


def test_tsv_is_whispers_rows_in_milliseconds() -> None:
    buf = io.StringIO()
    w = TsvWriter(buf)
    assert buf.getvalue() == "start\tend\ttext\n"  # valid (empty) from the start
    w.write(timed("Hello\tworld.", 1.0, 4.0))  # a tab in the text must not make a column
    w.write(dataclasses.replace(cap(text="Bye\nnow.", start=5.0, end=6.2345), speaker="Ana"))
    w.write(cap(type="partial", text="not written"))
    rows = [r.split("\t") for r in buf.getvalue().splitlines()]
    assert rows == [
        ["start", "end", "text"],
        ["1000", "1540", "Hello world."],  # the words' span: 1.0 to 1.3 + 0.24
        ["5000", "6234", "Ana: Bye now."],  # no words: the final's own span
    ]
    assert render_tsv([cap(text="b", start=2.0, end=3.0), cap(text="a", start=0.5, end=1.0)]) == (
        "start\tend\ttext\n500\t1000\ta\n2000\t3000\tb\n"
    )


def test_segment_bounds_are_the_words() -> None:
    c = timed("Ask not.", 3.0, 9.0)  # the voice detector's span holds seconds of silence
    assert spoken_span(c) == (3.0, pytest.approx(3.54))
    assert spoken_span(cap(start=1.0, end=2.0)) == (1.0, 2.0)  # no words: its own span
    nan = dataclasses.replace(c, words=(WordTiming(" x", math.nan, 1.0, 0.5),))
    assert spoken_span(nan) == (3.0, 9.0)  # times that make no sense: its own span
    buf = io.StringIO()
    WhisperJsonWriter(buf).write(c, Decoded(" Ask not.", (1, 2), -0.1, 0.01, "en", 300))
    import json

    [segment] = json.loads(buf.getvalue())["segments"]
    assert (segment["start"], segment["end"]) == (3.0, 3.54)


# ----------------------------------------------------------------------------- readers


def _files(style: CueStyle) -> tuple[str, str]:
    finals = [timed(LONG, 0.0, 9.0), timed(JFK, 10.0, 21.0, step=0.5)]
    s, v = io.StringIO(), io.StringIO()
    for c in finals:
        SrtWriter(s, style).write(c)
        VttWriter(v, style).write(c)
    return s.getvalue(), v.getvalue()


@pytest.mark.parametrize(
    "style", [CueStyle(), CueStyle(width=5, lines=1), CueStyle(highlight=True, words=3)]
)
def test_the_files_read_back_in_srt_webvtt_and_pysubs2(style: CueStyle) -> None:
    srt_text, vtt_text = _files(style)
    subs = list(srt.parse(srt_text))
    cues = list(webvtt.from_buffer(io.StringIO(vtt_text)))
    assert len(subs) == len(cues) > 2
    assert all(s.end > s.start for s in subs)
    assert [c.text for c in cues] == [s.content.replace("<u>", "").replace("</u>", "")
                                      for s in subs]  # fmt: skip
    pysubs2 = pytest.importorskip("pysubs2")
    for text, fmt in ((srt_text, "srt"), (vtt_text, "vtt")):
        events = pysubs2.SSAFile.from_string(text, format_=fmt).events
        assert len(events) == len(subs) and all(e.end > e.start for e in events)
