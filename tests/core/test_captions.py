"""Caption events, writers and the replay log, driven with synthetic captions."""

from __future__ import annotations

import dataclasses
import io
import json
import re
from pathlib import Path

import pytest

from streamcap.core.captions import Caption, CaptionLog
from streamcap.cues import sentences, split_cues, wrap_text
from streamcap.formats import (
    FORMATS,
    CaptionWriter,
    JsonlWriter,
    SrtWriter,
    TranscriptJsonlWriter,
    TxtWriter,
    VttWriter,
    format_of,
    format_srt_time,
    format_vtt_time,
    open_writer,
    render_srt,
    render_vtt,
)

LONG = (
    "The quick brown fox jumps over the lazy dog and then keeps on running through the "
    "dark forest until the night finally falls over the quiet hills."
)


def cap(
    type: str = "final",
    text: str = "hello world",
    start: float = 1.0,
    end: float = 2.5,
    seq: int = 1,
    segment: int = 0,
) -> Caption:
    return Caption(type, "s1", seq, segment, text, start, end, len(text), 123.456)  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- Caption


def test_to_dict_is_exact_wire_shape() -> None:
    c = Caption("partial", "room-1", 7, 3, "héllo", 1.23456, 2.0004, 4, 250.04)
    d = c.to_dict()
    assert list(d) == [
        "type",
        "stream",
        "seq",
        "segment",
        "text",
        "start",
        "end",
        "committed_chars",
        "latency_ms",
    ]
    assert d == {
        "type": "partial",
        "stream": "room-1",
        "seq": 7,
        "segment": 3,
        "text": "héllo",
        "start": 1.235,
        "end": 2.0,
        "committed_chars": 4,
        "latency_ms": 250.0,
    }
    assert json.loads(c.to_json()) == d
    assert "héllo" in c.to_json()  # not \u-escaped: smaller frames, readable logs


def test_from_dict_round_trip_and_errors() -> None:
    c = cap(start=0.5, end=1.25)
    assert Caption.from_dict(json.loads(c.to_json())) == Caption(
        "final", "s1", 1, 0, "hello world", 0.5, 1.25, 11, 123.5
    )
    with pytest.raises(ValueError, match="missing field 'seq'"):
        Caption.from_dict({k: v for k, v in c.to_dict().items() if k != "seq"})
    with pytest.raises(ValueError, match="'partial' or 'final'"):
        Caption.from_dict({**c.to_dict(), "type": "ready"})
    with pytest.raises(ValueError, match="wrong type"):
        Caption.from_dict({**c.to_dict(), "start": None})


def test_caption_is_frozen() -> None:
    with pytest.raises(AttributeError):
        cap().text = "x"  # type: ignore[misc]


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
    url = "x" * 100
    assert wrap_text(f"see {url} now", 42) == ["see", "x" * 42, "x" * 42, "x" * 16 + " now"]
    assert wrap_text("z" * 84 + " end") == ["z" * 42, "z" * 42, "end"]


def test_split_cues_short_text_is_one_balanced_cue() -> None:
    text = "Hello there, this is a sentence of about fifty chars."
    [(t0, t1, lines)] = split_cues(text, 1.0, 3.0)
    assert (t0, t1) == (1.0, 3.0)
    assert lines == ["Hello there, this is a", "sentence of about fifty chars."]
    assert split_cues("one", 2.0, 1.0) == [(2.0, 2.0, ["one"])]  # end before start: zero span
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


def test_split_cues_falls_back_to_greedy_when_even_split_overflows() -> None:
    cues = split_cues("y" * 100, 0.0, 1.0)  # one unbreakable "word", cut into 42+42+16
    assert [len(lines) for _, _, lines in cues] == [1, 2]
    # Evening these out by characters would need a 3-line cue: keep the greedy grouping.
    text = " ".join("x" * n for n in [35, 10, 5, 20, 3, 40, 3, 1, 1])
    cues = split_cues(text, 0.0, 5.0)
    assert [lines for _, _, lines in cues] == [wrap_text(text)[:2], wrap_text(text)[2:]]
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


def test_split_cues_prefers_sentence_ends() -> None:
    text = (
        "It was late. We walked home through the rain and the cold wind, talking about "
        "nothing. Then we slept."
    )
    cues = split_cues(text, 0.0, 10.0)
    # The even split would cut mid-sentence ("... the rain and the"); sentences stay whole.
    assert [" ".join(lines) for _, _, lines in cues] == [
        "It was late.",
        "We walked home through the rain and the cold wind, talking about nothing.",
        "Then we slept.",
    ]
    assert [c[0] for c in cues][1:] == [c[1] for c in cues][:-1] and cues[-1][1] == 10.0
    for _, _, lines in cues:
        assert len(lines) <= 2 and all(len(x) <= 42 for x in lines)


def test_split_cues_packs_short_sentences_and_splits_long_ones_evenly() -> None:
    short = "Yes. No. Maybe so."
    long = "Then " + " ".join(["word"] * 40) + "."
    cues = split_cues(f"{short} {long} Done.", 0.0, 30.0)
    texts = [" ".join(lines) for _, _, lines in cues]
    assert texts[0] == short  # whole sentences that fit together share a cue
    assert " ".join(texts[1:-1]) == long and len(texts) >= 4  # a long one alone, evened out
    assert texts[-1] == "Done."
    for _, _, lines in cues:
        assert len(lines) <= 2 and all(len(x) <= 42 for x in lines)


def test_formats_and_format_of() -> None:
    assert FORMATS == ("srt", "vtt", "jsonl", "txt", "json")
    assert format_of("a.SRT") == "srt" and format_of(Path("x/b.jsonl")) == "jsonl"
    assert format_of("a.doc") is None and format_of("captions") is None


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


# ----------------------------------------------------------------------------- CaptionLog


def screen(events: list[Caption]) -> dict[int, tuple[str, str]]:
    """What a viewer shows: per segment the final, else the latest partial."""
    shown: dict[int, tuple[str, str]] = {}
    for e in events:
        if e.type == "final" or shown.get(e.segment, ("", ""))[0] != "final":
            shown[e.segment] = (e.type, e.text)
    return shown


def test_log_seq_and_fields() -> None:
    log = CaptionLog("room")
    assert log.last_seq == 0 and log.oldest_seq is None and len(log) == 0
    a = log.emit("partial", 0, "hel", 0.0, 0.5, 0, 80.0)
    b = log.emit("final", 0, "hello", 0.0, 0.9)
    assert (a.seq, b.seq, b.stream, b.committed_chars, b.latency_ms) == (1, 2, "room", 0, 0.0)
    assert log.last_seq == 2
    with pytest.raises(ValueError, match="'partial' or 'final'"):
        log.emit("draft", 0, "x", 0.0, 1.0)  # type: ignore[arg-type]
    assert log.last_seq == 2  # a rejected event takes no seq


def test_log_keeps_finals_and_latest_open_partial() -> None:
    log = CaptionLog("s")
    live = [
        log.emit("partial", 0, "a", 0, 1),
        log.emit("partial", 0, "a b", 0, 1),
        log.emit("final", 0, "a b c", 0, 1),
        log.emit("partial", 1, "d", 1, 2),
        log.emit("partial", 2, "x", 2, 3),  # two open segments at once
        log.emit("partial", 1, "d e", 1, 2),
    ]
    stored = log.since(0)
    assert [e.seq for e in stored] == [3, 5, 6]
    assert len(log) == 3 and log.oldest_seq == 3
    assert screen(stored) == screen(live)
    # A viewer that saw up to any seq N and then replays since(N) ends on the live screen.
    for n in range(len(live) + 1):
        assert screen(live[:n] + log.since(n)) == screen(live), n
    assert log.since(6) == [] and log.since(100) == []
    assert [e.text for e in log.finals()] == ["a b c"]


def test_log_bounded_finals() -> None:
    log = CaptionLog("s", max_finals=3)
    for i in range(10):
        log.emit("final", i, f"t{i}", i, i + 1)
    log.emit("partial", 10, "open", 10, 11)
    assert [e.seq for e in log.finals()] == [8, 9, 10]
    assert log.oldest_seq == 8
    # Older than the oldest stored: what remains, in order.
    assert [e.seq for e in log.since(2)] == [8, 9, 10, 11]
    assert [e.seq for e in log.since(9)] == [10, 11]
    with pytest.raises(ValueError, match="max_finals"):
        CaptionLog("s", max_finals=0)


def test_a_finals_words_go_on_the_wire_and_come_back() -> None:
    from dataclasses import replace

    from streamcap.core.captions import CaptionEvent
    from streamcap.core.decode_types import WordTiming

    words = (WordTiming("hello", 0.5, 0.81234, 0.9), WordTiming("world", 0.9, 1.25, 0.87654))
    c = replace(cap(start=0.5, end=1.25), words=words)
    d = json.loads(c.to_json())
    assert d["words"] == [
        {"word": "hello", "start": 0.5, "end": 0.812, "probability": 0.9},
        {"word": "world", "start": 0.9, "end": 1.25, "probability": 0.8765},
    ]
    back = Caption.from_dict(d)
    assert [w.word for w in back.words] == ["hello", "world"] and back.words[0].end == 0.812
    assert "words" not in cap().to_dict()  # untimed: left off the wire
    with pytest.raises(ValueError, match="words must be a list"):
        Caption.from_dict({**d, "words": "hello"})
    with pytest.raises(ValueError, match="missing field 'probability'"):
        Caption.from_dict({**d, "words": [{"word": "a", "start": 0, "end": 1}]})
    # a later publisher session moves the words with the caption
    ev = CaptionEvent("final", 1, "hello world", 0.5, 1.25, 11, 0.0, words)
    assert [w.start for w in ev.shifted(3, 10.0).words] == [10.5, 10.9]
    log = CaptionLog("s1")
    assert log.add(ev).words == words


def test_who_spoke_goes_into_every_format() -> None:
    """A room's captions name their speaker: JSONL has the field, WebVTT a voice span that a
    WebVTT parser reads back, SRT and TXT lead with "Name: " (parsed back by `srt`)."""
    import html

    import srt
    import webvtt

    ana = dataclasses.replace(cap(text="Hello there.", start=0.0, end=1.0), speaker="Ana")
    ben = dataclasses.replace(cap(text="Hi Ana, <b> & all.", start=1.0, end=2.0), speaker="Ben")
    anon = cap(text="Nobody said it.", start=2.0, end=3.0)
    events = [ana, ben, anon]
    vtt = list(webvtt.from_buffer(io.StringIO(render_vtt(events))))
    assert [(c.voice, html.unescape(c.text)) for c in vtt] == [  # escaped markup comes back
        ("Ana", "Hello there."), ("Ben", "Hi Ana, <b> & all."), (None, "Nobody said it.")
    ]  # fmt: skip
    subs = list(srt.parse(render_srt(events)))
    assert [s.content for s in subs] == ["Ana: Hello there.", "Ben: Hi Ana, <b> & all.",
                                         "Nobody said it."]  # fmt: skip
    buf = io.StringIO()
    TxtWriter(buf).write_all(events)
    assert buf.getvalue().splitlines()[:2] == ["Ana: Hello there.", "Ben: Hi Ana, <b> & all."]
    assert ana.to_dict()["speaker"] == "Ana" and "speaker" not in anon.to_dict()
    assert Caption.from_dict(ben.to_dict()).to_dict() == ben.to_dict()


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
    # a word longer than a line is cut, and underlined in each piece while it is said
    assert [s.content for s in srt.parse(two.getvalue())] == [
        "<u>abcd</u>", "<u>efgh</u>\nij", "efgh\n<u>ij</u>"
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
