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
    entry.begin_session()
    first = entry.add(CaptionEvent("final", 0, "One.", 0.0, 2.0, 4))
    entry.end_session(3.0)
    entry.begin_session()  # the publisher reconnected: its pipeline restarts at segment 0, t 0
    second = entry.add(CaptionEvent("final", 0, "Two.", 0.5, 1.5, 4))
    assert (first.seq, second.seq) == (1, 2)
    assert second.segment == 1 and second.start == 3.5 and second.end == 4.5
