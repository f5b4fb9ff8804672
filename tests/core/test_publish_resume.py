"""The publisher's pure parts (`streamcap publish`): the resume buffer and where to resume
(`core.resume`), the pacer under the flood guard, the backoff and the close verdicts
(`core.pacing`). No socket, thread or clock: positions and times are given."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamcap.core.pacing import Backoff, SendPacer, after_close
from streamcap.core.resume import ResumeBuffer, Session, resume_position
from streamcap.server.protocol import IngestState

RATE = 100  # samples a second: small numbers, same rules


def ramp(start: int, n: int) -> np.ndarray:
    """Samples whose values are their positions: what comes out says where it came from."""
    return np.arange(start, start + n, dtype=np.float32)


def fill(buf: ResumeBuffer, seconds: float, chunk: int = 10) -> None:
    for _ in range(round(seconds * RATE) // chunk):
        buf.append(ramp(buf.captured, chunk))


# ----------------------------------------------------------------------------- the buffer


def test_audio_goes_out_in_order_and_is_kept_for_a_resend() -> None:
    buf = ResumeBuffer(capacity_s=10, keep_s=2, rate=RATE)
    fill(buf, 5)
    pos, a = buf.take(150)
    assert pos == 0 and np.array_equal(a, ramp(0, 150))
    pos, b = buf.take(1000)
    assert pos == 150 and np.array_equal(b, ramp(150, 350)) and buf.unsent == 0
    assert buf.start == 300  # the last keep_s (2 s) of what was sent is held
    assert buf.rewind(350) == 0 and buf.sent == 350
    pos, again = buf.take(1000)
    assert pos == 350 and np.array_equal(again, ramp(350, 150))
    assert buf.rewind(100) == 200 and buf.sent == 300  # older than keep_s: 2 s cannot be
    assert buf.take(0) == (300, pytest.approx(np.zeros(0)))


def test_a_live_sources_overflow_drops_the_oldest_unsent_and_counts_it() -> None:
    buf = ResumeBuffer(capacity_s=3, keep_s=1, rate=RATE)
    fill(buf, 1)
    buf.take(100)  # one second sent, kept
    fill(buf, 3)
    assert not buf.lost and buf.full  # exactly the capacity waits
    dropped = buf.append(ramp(buf.captured, 50))
    assert dropped == 50 and buf.lost == 50 and buf.unsent == 300
    pos, a = buf.take(10)
    assert pos == 150 and np.array_equal(a, ramp(150, 10))  # the oldest unsent went first
    assert buf.rewind(0) == 150  # what was kept before the gap went with it: never spliced


def test_a_file_read_ahead_is_dropped_when_told_to_stop() -> None:
    buf = ResumeBuffer(capacity_s=10, keep_s=1, rate=RATE)
    fill(buf, 4)
    buf.take(120)
    assert buf.drop_unsent() == 280 and buf.captured == buf.sent == 120 and not buf.lost
    assert buf.take(100)[1].size == 0
    buf.append(ramp(120, 10))  # and it goes on from there
    assert np.array_equal(buf.take(100)[1], ramp(120, 10))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["append", "take", "rewind"]), st.integers(0, 80)),
                max_size=60))  # fmt: skip
def test_whatever_happens_each_sample_sent_is_the_one_at_its_position(
    steps: list[tuple[str, int]],
) -> None:
    buf = ResumeBuffer(capacity_s=1.5, keep_s=0.5, rate=RATE)
    for op, n in steps:
        if op == "append":
            buf.append(ramp(buf.captured, n))
        elif op == "take":
            pos, got = buf.take(n)
            assert np.array_equal(got, ramp(pos, got.size))
        else:
            buf.rewind(buf.sent - n)
        assert buf.start <= buf.sent <= buf.captured
        assert buf.unsent <= buf.capacity + buf.keep  # a rewind may add what it sends again


# ----------------------------------------------------------------------------- resuming


def test_where_a_new_connection_resumes() -> None:
    first = Session(stream_time=10.0, position=0, epoch="e1")
    # dropped after 12 s sent; the server received 11.5 (its ready: 21.5): resend 0.5 s
    assert resume_position(first, 1200, 21.5, "e1", RATE) == 1150
    # restarted from its recording, whose finals end at 18.2: resend from there
    assert resume_position(first, 1200, 18.2, "e1", RATE) == 820
    # a room's clock ran on while others spoke: the server has it all
    assert resume_position(first, 1200, 40.0, "e1", RATE) == 1200
    # a log begun anew (restart without --record: another epoch, even at the same time),
    # an earlier time, an old server that says no time, the first connection
    assert resume_position(first, 1200, 10.0, "e2", RATE) == 1200
    assert resume_position(first, 1200, 3.0, "e1", RATE) == 1200
    assert resume_position(first, 1200, None, "", RATE) == 1200
    assert resume_position(None, 1200, 21.5, "e1", RATE) == 1200
    assert resume_position(Session(10.0, 0), 1200, 21.5, "", RATE) == 1150  # no epochs said
    # a later connection counts from where it began sending
    assert resume_position(Session(21.5, 1150, "e1"), 1500, 23.0, "e1", RATE) == 1300


# ----------------------------------------------------------------------------- pacing


def test_the_pacer_never_trips_the_servers_flood_guard() -> None:
    """A backlog sent as the pacer allows, against the server's own guard (`IngestState`,
    the same code the server runs), with the frames arriving a little late."""
    pacer = SendPacer(burst_s=5.0)
    state = IngestState(burst_s=5.0, max_frame_rate=None)
    state.receive_text('{"type":"start","sample_rate":16000,"format":"pcm_s16le"}')
    backlog, frame, now, sent = 30.0, 0.1, 1000.0, 0.0
    pacer.begin(now)
    while sent < backlog + 10:  # the backlog, then live audio as it comes
        if pacer.room(now) >= frame:
            state.receive_bytes(b"\0\0" * 1600, now + 0.05)  # raises on a flood
            pacer.sent(frame)
            sent += frame
        else:
            now += max(0.01, pacer.wait(now, frame))
    assert 3.9 <= sent - (now - 1000.0) <= 4.0 + frame  # ahead by the burst less the margin
    assert pacer.wait(now, frame) > 0


def test_the_pacer_halves_after_a_flood_and_backoff_doubles() -> None:
    pacer = SendPacer(burst_s=5.0)
    assert pacer.ahead_s == 4.0 and pacer.room(0.0) == 4.0  # before any frame
    pacer.flooded()
    assert pacer.ahead_s == 1.5
    pacer.begin(10.0)
    pacer.sent(1.5)
    assert pacer.room(10.0) == 0 and pacer.room(11.0) == pytest.approx(1.0)
    b = Backoff(0.5, 4.0)
    assert [b.next() for _ in range(5)] == [0.5, 1.0, 2.0, 4.0, 4.0]
    b.reset()
    assert b.next() == 0.5
    with pytest.raises(ValueError):
        SendPacer(0)


@pytest.mark.parametrize(
    ("code", "reason", "verdict"),
    [
        (1000, "stopped", "done"),
        (1001, "server shutting down", "retry"),
        (1001, "replaced by a new connection", "replaced"),
        (None, "", "retry"),
        (1006, "", "retry"),
        (1013, "server is full: ...", "retry"),
        (1011, "internal server error", "retry"),
        (1008, "missing publish token", "fatal"),
        (1008, "wrong publish token", "fatal"),
        (1008, "invalid stream id 'a b'", "fatal"),
        (1008, "audio arriving faster than real time (5.2 s ahead, limit 5 s)", "flood"),
        (1008, "too many messages: limit 100 per second", "flood"),
        (1008, "stream 'main' already has a publisher", "retry"),
        (1003, "unknown field 'langauge'", "fatal"),
        (1009, "frame too big", "fatal"),
    ],
)
def test_what_a_close_means(code: int | None, reason: str, verdict: str) -> None:
    assert after_close(code, reason) == verdict
