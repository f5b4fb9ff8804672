"""Caption events and the replay log (`core.captions`), driven with synthetic captions."""

from __future__ import annotations

import dataclasses
import io
import json

import pytest
from captionkit import cap

from streamcap.core.captions import Caption, CaptionLog
from streamcap.formats import (
    TxtWriter,
    render_srt,
    render_vtt,
)

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
