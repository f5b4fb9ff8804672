"""The file writers (`streamcap.formats`): SRT, WebVTT, JSONL, TXT and whisper JSON, streamed
final by final; openai-whisper's cue flags."""

from __future__ import annotations

import dataclasses
import io
import json
import re
from pathlib import Path

import pytest
from captionkit import LONG, cap

from streamcap.core.captions import Caption
from streamcap.formats import (
    CaptionWriter,
    JsonlWriter,
    SrtWriter,
    TranscriptJsonlWriter,
    TxtWriter,
    VttWriter,
    open_writer,
    render_srt,
    render_vtt,
)

# ----------------------------------------------------------------------------- writers


def test_srt_writer_streams_finals_only() -> None:
    buf = io.StringIO()
    w = SrtWriter(buf)
    w.write(cap("partial", "ignored"))
    assert buf.getvalue() == ""
    w.write(cap(text="hello world", start=1.0, end=2.5))
    w.write(cap(text="   "))  # an empty final makes no (invalid) empty cue
    w.write(cap(text=LONG, start=62.345, end=70.0))
    out = buf.getvalue()
    assert out.startswith("1\n00:00:01,000 --> 00:00:02,500\nhello world\n\n2\n00:01:02,345 --> ")
    blocks = out.strip("\n").split("\n\n")
    assert [b.split("\n")[0] for b in blocks] == ["1", "2", "3"]
    assert blocks[-1].split("\n")[1].endswith("--> 00:01:10,000")
    w.close()
    assert not buf.closed  # a file object we were given stays the caller's
    with pytest.raises(ValueError, match="closed"):
        w.write(cap())


def test_vtt_writer_header_times_and_escaping() -> None:
    buf = io.StringIO()
    with VttWriter(buf) as w:
        assert buf.getvalue() == "WEBVTT\n\n"  # header right away: a valid file even if empty
        w.write(cap(text="a <b> & c --> d", start=0.0, end=1.0))
    assert buf.getvalue() == (
        "WEBVTT\n\n00:00:00.000 --> 00:00:01.000\na &lt;b&gt; &amp; c --&gt; d\n\n"
    )


def test_jsonl_writer_with_and_without_partials() -> None:
    events = [cap("partial", "hel", seq=1), cap("final", "hello", seq=2)]
    plain, full = io.StringIO(), io.StringIO()
    JsonlWriter(plain).write_all(events)
    JsonlWriter(full, include_partials=True).write_all(events)
    assert [json.loads(x)["seq"] for x in plain.getvalue().splitlines()] == [2]
    assert [Caption.from_dict(json.loads(x)) for x in full.getvalue().splitlines()] == [
        Caption("partial", "s1", 1, 0, "hel", 1.0, 2.5, 3, 123.5),
        Caption("final", "s1", 2, 0, "hello", 1.0, 2.5, 5, 123.5),
    ]


def test_txt_writer_one_final_per_line() -> None:
    buf = io.StringIO()
    TxtWriter(buf).write_all([cap(text=" Hello \n world "), cap("partial", "x"), cap(text="Bye.")])
    assert buf.getvalue() == "Hello world\nBye.\n"


def test_base_writer_is_abstract() -> None:
    with pytest.raises(NotImplementedError):
        CaptionWriter(io.StringIO()).write(cap())


@pytest.mark.parametrize(
    ("name", "cls"),
    [
        ("a.srt", SrtWriter),
        ("a.VTT", VttWriter),
        ("a.jsonl", TranscriptJsonlWriter),
        ("a.txt", TxtWriter),
    ],  # fmt: skip
)
def test_open_writer_by_suffix_flushes_each_write(tmp_path: Path, name: str, cls: type) -> None:
    path = tmp_path / name
    w = open_writer(path)
    assert type(w) is cls
    w.write(cap(text="hello world"))
    # Flushed: readable from disk before close, so a crash loses nothing written so far.
    assert "hello world" in path.read_text(encoding="utf-8")
    w.close()
    w.close()  # idempotent


def test_open_writer_jsonl_partials_and_str_path(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    with open_writer(str(path), include_partials=True) as w:
        w.write(cap("partial", "hi"))
    assert json.loads(path.read_text())["type"] == "partial"


@pytest.mark.parametrize("name", ["a.mp4", "captions", "a.srt.bak"])
def test_open_writer_rejects_unknown_suffix(tmp_path: Path, name: str) -> None:
    with pytest.raises(ValueError, match=r"unsupported caption file type .*use \.srt"):
        open_writer(tmp_path / name)
    assert not (tmp_path / name).exists()


def test_render_srt_and_vtt_documents() -> None:
    events = [cap("partial", "hel"), cap(text="hello", start=0.0, end=1.0), cap(text="again")]
    srt = render_srt(events)
    assert srt == (
        "1\n00:00:00,000 --> 00:00:01,000\nhello\n\n2\n00:00:01,000 --> 00:00:02,500\nagain\n\n"
    )
    vtt = render_vtt(events)
    assert vtt.startswith("WEBVTT\n\n00:00:00.000 --> 00:00:01.000\nhello\n\n")
    assert render_vtt([]) == "WEBVTT\n\n"
    assert render_srt([]) == ""
    cue = re.compile(r"\d\d:\d\d:\d\d\.\d{3} --> \d\d:\d\d:\d\d\.\d{3}")
    assert len(cue.findall(render_vtt([cap(text=LONG)]))) == 2


# ----------------------------------------------------------------------------- whisper's flags


def timed(text: str, spans: list[tuple[float, float]], start: float, end: float) -> Caption:
    """A final whose words (Whisper's leading space kept) are said over `spans`."""
    from streamcap.core.decode_types import WordTiming

    words = tuple(
        WordTiming(f" {w}", a, b, 0.9) for w, (a, b) in zip(text.split(), spans, strict=True)
    )
    return dataclasses.replace(cap(text=text, start=start, end=end), words=words)


def test_highlight_words_underlines_each_word_over_its_time() -> None:
    """As openai-whisper's ``--highlight_words``: a cue per word, the plain text over the
    gaps; ours also covers the final's own span, so the text is on screen as long as without."""
    from streamcap.cues import CueStyle

    c = timed("Hello big world.", [(0.5, 0.9), (1.0, 1.2), (1.2, 1.8)], 0.0, 2.0)
    buf = io.StringIO()
    SrtWriter(buf, CueStyle(highlight=True)).write(c)
    import srt

    assert [(s.start.total_seconds(), s.end.total_seconds(), s.content)
            for s in srt.parse(buf.getvalue())] == [
        (0.0, 0.5, "Hello big world."),
        (0.5, 0.9, "<u>Hello</u> big world."),
        (0.9, 1.0, "Hello big world."),
        (1.0, 1.2, "Hello <u>big</u> world."),
        (1.2, 1.8, "Hello big <u>world.</u>"),
        (1.8, 2.0, "Hello big world."),
    ]  # fmt: skip
    vtt = io.StringIO()
    VttWriter(vtt, CueStyle(highlight=True)).write(
        timed("a <b> c", [(0.0, 0.2), (0.2, 0.4), (0.4, 1.0)], 0.0, 1.0)
    )
    # escaped text, real markup: a WebVTT parser reads the underline and the escaped text back
    import webvtt

    cues = list(webvtt.from_buffer(io.StringIO(vtt.getvalue())))
    assert [c.raw_text for c in cues] == ["<u>a</u> &lt;b&gt; c", "a <u>&lt;b&gt;</u> c",
                                          "a &lt;b&gt; <u>c</u>"]  # fmt: skip
    assert cues[1].text == "a &lt;b&gt; c"


def test_max_line_width_and_count_shape_the_cues() -> None:
    """``--max-line-width 12 --max-line-count 1``: one line of at most 12 characters a cue,
    still timed by the words."""
    from streamcap.cues import CueStyle

    text = "one two three four five six seven"
    spans = [(i * 0.5, i * 0.5 + 0.4) for i in range(7)]
    buf = io.StringIO()
    SrtWriter(buf, CueStyle(width=12, lines=1)).write(timed(text, spans, 0.0, 3.5))
    import srt

    subs = list(srt.parse(buf.getvalue()))
    assert all("\n" not in s.content and len(s.content) <= 12 for s in subs)
    assert " ".join(s.content for s in subs) == text
    assert subs[0].start.total_seconds() == 0.0 and subs[-1].end.total_seconds() == 3.5
    with pytest.raises(ValueError, match=">= 1"):
        CueStyle(width=0)
    two = io.StringIO()
    SrtWriter(two, CueStyle(width=4, lines=2, highlight=True)).write(
        timed("abcdefgh ij", [(0.0, 1.0), (1.0, 2.0)], 0.0, 2.0)
    )
    # a word longer than a line is never cut (as whisper writes it): it has its own line
    assert [s.content for s in srt.parse(two.getvalue())] == [
        "<u>abcdefgh</u>\nij", "abcdefgh\n<u>ij</u>"
    ]  # fmt: skip


def test_file_jsonl_drops_wire_fields_and_leading_spaces() -> None:
    c = timed("Hello world.", [(0.1, 0.5), (0.6, 1.0)], 0.0, 1.2)
    buf = io.StringIO()
    TranscriptJsonlWriter(buf).write(c)
    row = json.loads(buf.getvalue())
    assert row == {
        "type": "final", "segment": 0, "text": "Hello world.", "start": 0.0, "end": 1.2,
        "words": [{"word": "Hello", "start": 0.1, "end": 0.5, "probability": 0.9},
                  {"word": "world.", "start": 0.6, "end": 1.0, "probability": 0.9}],
    }  # fmt: skip
    wire = io.StringIO()
    JsonlWriter(wire).write(c)  # the recording keeps the event as sent
    assert Caption.from_dict(json.loads(wire.getvalue())).words[0].word == " Hello"


def test_whisper_json_is_valid_after_every_final() -> None:
    from streamcap.formats import Decoded, WhisperJsonWriter

    buf = io.StringIO()
    w = WhisperJsonWriter(buf)
    assert json.loads(buf.getvalue()) == {"segments": [], "text": "", "language": None}
    first = timed("Hello world.", [(0.1, 0.5), (0.6, 1.0)], 0.0, 1.2)
    w.write(first, Decoded(" Hello world.", (1, 2, 3), -0.2, 0.01, "en", 0))
    doc = json.loads(buf.getvalue())
    assert doc["text"] == " Hello world." and doc["language"] == "en"
    assert doc["segments"][0]["words"][0] == {"word": " Hello", "start": 0.1, "end": 0.5,
                                              "probability": 0.9}  # fmt: skip
    second = dataclasses.replace(cap(text="Bye.", start=2.0, end=2.5), speaker="Ana")
    w.write(second, Decoded(" Bye.", (4,), -0.1, 0.02, "en", 200))
    doc = json.loads(buf.getvalue())
    assert [s["id"] for s in doc["segments"]] == [0, 1] and doc["text"] == " Hello world. Bye."
    assert doc["segments"][1]["speaker"] == "Ana" and "words" not in doc["segments"][1]
    with pytest.raises(ValueError, match="needs each final's decode"):
        w.write(cap(text="no decode"))
