"""One caption sequence per stream: the policy's events are unnumbered, the sink numbers them."""

from __future__ import annotations

import dataclasses

import pytest

from streamcap.core.captions import CaptionEvent, CaptionLog
from streamcap.server.hub import StreamEntry


def test_events_carry_no_number_and_the_log_numbers_them() -> None:
    fields = {f.name for f in dataclasses.fields(CaptionEvent)}
    assert not fields & {"seq", "stream", "epoch"}
    log = CaptionLog("s", epoch="e")
    caps = [
        log.add(CaptionEvent("partial", 0, "a", 0.0, 1.0)),
        log.add(CaptionEvent("final", 0, "A.", 0.0, 1.2, 2)),
    ]
    assert [c.seq for c in caps] == [1, 2] and {c.epoch for c in caps} == {"e"}
    assert log.since(0) == [caps[1]]  # the final replaced its segment's partial
    with pytest.raises(ValueError):
        log.add(CaptionEvent("draft", 0, "x", 0.0, 1.0))  # type: ignore[arg-type]


def test_a_later_session_continues_segments_and_time_in_the_same_sequence() -> None:
    entry = StreamEntry("s", CaptionLog("s", epoch="e"))
    pub = entry.begin_session()
    first = entry.add(CaptionEvent("final", 0, "One.", 0.0, 2.0, 4), pub)
    entry.end_session(pub, 3.0)
    pub = entry.begin_session()  # the publisher reconnected: its pipeline restarts at 0, t 0
    second = entry.add(CaptionEvent("final", 0, "Two.", 0.5, 1.5, 4), pub)
    assert (first.seq, second.seq) == (1, 2)
    assert second.segment == 1 and second.start == 3.5 and second.end == 4.5


def test_a_room_interleaves_its_speakers_in_one_sequence() -> None:
    """Two publishers in one room: one seq, segments numbered as they appear, times on the
    room's clock (the second joined 10 s after the first), each event named."""
    entry = StreamEntry("room", CaptionLog("room", epoch="e"))
    ana = entry.begin_session("Ana", now=100.0)
    ben = entry.begin_session("Ben", now=110.0)
    assert entry.speakers == ["Ana", "Ben"] and ana.time_offset == 0.0 and ben.time_offset == 10.0
    out = [
        entry.add(CaptionEvent("partial", 1, "hello", 10.0, 11.0), ana),
        entry.add(CaptionEvent("partial", 1, "hi", 0.5, 1.0), ben),  # both speak at once
        entry.add(CaptionEvent("final", 1, "Hello there.", 10.0, 11.5, 12), ana),
        entry.add(CaptionEvent("final", 1, "Hi Ana.", 0.5, 1.8, 7), ben),
        entry.add(CaptionEvent("final", 2, "How are you?", 12.0, 13.0, 12), ana),
    ]
    assert [c.seq for c in out] == [1, 2, 3, 4, 5]
    assert [(c.speaker, c.segment) for c in out] == [
        ("Ana", 0), ("Ben", 1), ("Ana", 0), ("Ben", 1), ("Ana", 2)
    ]  # fmt: skip
    assert out[3].start == 10.5 and out[3].end == 11.8  # Ben's time 0 is the room's 10 s
    assert [c.text for c in entry.log.finals()] == ["Hello there.", "Hi Ana.", "How are you?"]
    entry.end_session(ana, 14.0)
    assert entry.publishing and not entry.ended.is_set()  # Ben is still there
    entry.end_session(ben, 5.0)
    assert not entry.publishing and entry.ended.is_set() and entry.audio_s == 15.0
