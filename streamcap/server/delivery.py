"""A stream's captions between the worker, its log, its recording and its readers.

In: captions come from the worker thread through `call_soon_threadsafe`, are numbered into the
room's `CaptionLog` (`hub.StreamEntry.add`, which wakes the viewers), handed to the recording
(`record_io.RecordingIO`: written off the event loop, in order), offered to the stream's
caption sinks (`sinks.runner.SinkRunner`: each in its own task, never waited for) and
counted. Out: what a viewer at a cursor is sent next, and the finals a subtitle file is made
of, with those the log has dropped from memory read back from the recording (off the event
loop). Its own piece because both directions share the one rule of where a stream's finals
are: the newest in memory, all of them on disk.

Before the log, a room's captions pass its cross-talk check (`rooms.RoomCrossTalk`): a
sentence a microphone heard from another participant is left out, and a caption that could be
such a copy waits (at most `CrossTalkConfig.hold_s`, on a timer here) for the other
microphones' captions. The room's last publisher leaving, and the shutdown, decide whatever
still waits.

Reading back costs real work, so a viewer's replay from the recording comes in chunks of
`REPLAY_CHUNK` finals, each paid for from its client address's byte budget (`bucket.ByteBudget`,
shared with subtitle downloads) before it is read: a client that loops `since=0` waits for its
budget instead of taking the CPU from the captions, and one that leaves stops the reading at
the next chunk (red-team round 4, bug 2).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Protocol

from streamcap.core.captions import Caption, CaptionEvent
from streamcap.core.crosstalk import CrossTalkConfig
from streamcap.core.load_shed import LoadShedder
from streamcap.core.speaker_names import renamed
from streamcap.sinks.runner import SinkRunner

from .bucket import ByteBudget
from .hub import Publication, StreamEntry
from .metrics import ServerMetrics
from .ratelog import RateLimitedLog
from .record import Recorder, Restored
from .record_io import RecordingIO
from .rooms import RoomCrossTalk

#: Recorded finals a replay reads at a time.
REPLAY_CHUNK = 256
#: At shutdown, how long the recording's last writes may take (a disk that hangs loses them).
CLOSE_TIMEOUT_S = 10.0
#: The rooms' cross-talk check, as measured (`core.crosstalk`).
CROSSTALK = CrossTalkConfig()


class Sendable(Protocol):
    """What a viewer is sent: a `Caption`, or a recorded final as its bytes
    (`record_index.RecordedLine`)."""

    @property
    def seq(self) -> int: ...

    def to_json(self) -> str: ...


class Delivery:
    """The captions of one server's streams; `recorder` is None without `--record`. Reading
    back from the recording is paid for from `budget`. `crosstalk`: the rooms' cross-talk
    check (None: off, every caption goes straight to its log)."""

    def __init__(
        self,
        recorder: Recorder | None,
        metrics: ServerMetrics,
        rlog: RateLimitedLog,
        budget: ByteBudget,
        crosstalk: CrossTalkConfig | None = CROSSTALK,
        sinks: SinkRunner | None = None,
    ) -> None:
        self.recording = RecordingIO(recorder) if recorder is not None else None
        self.metrics = metrics
        self.rlog = rlog
        self.budget = budget
        self.crosstalk = crosstalk
        #: the streams' caption sinks (YouTube, Zoom, OBS): each caption in the log is offered
        #: to its stream's, as viewers are sent it (renamed); they never wait (`sinks.runner`)
        self.sinks = sinks
        #: each live room's cross-talk check, and its timer (`_settle`)
        self._checks: dict[str, tuple[RoomCrossTalk, asyncio.TimerHandle | None]] = {}
        #: the rooms with a publisher: their viewers are woken when the last one leaves
        #: (`stream_closed`), to be told that nobody publishes now (`viewers`, `status=1`)
        self._live: dict[str, StreamEntry] = {}

    # ------------------------------------------------------------------ in

    def caption_callback(
        self, entry: StreamEntry, pub: Publication
    ) -> Callable[[CaptionEvent], None]:
        """Where `pub`'s pipeline sends its captions (call it on the event loop when `pub`
        starts; the callback it returns may be called from any thread). The stream's next
        seqs are reserved now, so the reservation is on disk before its first event."""
        loop = asyncio.get_running_loop()
        if self.recording is not None:
            self.recording.reserve(entry.log.stream, entry.log.epoch, entry.log.last_seq + 1)
        # a publisher starts: its viewers hear it (a room whose start failed is let go here)
        self._live = {s: e for s, e in self._live.items() if e.publishing}
        self._live[entry.stream] = entry
        _wake(entry)

        def on_caption(cap: CaptionEvent) -> None:  # worker thread or the loop (feed)
            with contextlib.suppress(RuntimeError):  # the loop is closed at shutdown
                loop.call_soon_threadsafe(self._deliver, entry, cap, pub)

        return on_caption

    def pace_callback(self, entry: StreamEntry) -> Callable[[LoadShedder], None]:
        """Where a pipeline of `entry`'s says its partials' pace changed (`LiveStream.on_pace`,
        any thread): the entry keeps it, its status viewers are told, /metrics counts it."""
        loop = asyncio.get_running_loop()

        def apply(pace: str, behind: float) -> None:
            entry.pace, entry.behind_s = pace, behind
            self.metrics.pace_changed(pace)
            _wake(entry)

        def on_pace(shed: LoadShedder) -> None:
            with contextlib.suppress(RuntimeError):  # the loop is closed at shutdown
                loop.call_soon_threadsafe(apply, shed.pace.value, round(shed.behind_s, 1))

        return on_pace

    def _deliver(self, entry: StreamEntry, cap: CaptionEvent, pub: Publication) -> None:
        """A caption of `pub`'s pipeline: through its room's cross-talk check into the log."""
        if self.crosstalk is None:
            self._add(entry, cap, pub)
            return
        room = self._check(entry)
        try:
            ready = room.offer(cap, pub, time.monotonic())
        except Exception:  # the check never costs a caption: what it holds goes as it came
            self.rlog.error(
                "crosstalk", "stream %s: the cross-talk check failed", entry.stream, exc_info=True
            )
            ready = room.drain()
            if not any(c is cap for c, _ in ready):
                ready.append((cap, pub))
        self._add_all(room, ready)

    def _check(self, entry: StreamEntry) -> RoomCrossTalk:
        have = self._checks.get(entry.stream)
        if have is not None and have[0].entry is entry:
            return have[0]
        if have is not None:  # an entry that was replaced: what waited goes to its own log
            self._settle(have[0], flush=True)
        room = RoomCrossTalk(entry, self.crosstalk)
        self._checks[entry.stream] = (room, None)
        return room

    def _settle(self, room: RoomCrossTalk, flush: bool = False) -> None:
        """The timer of `room`: decide what has waited long enough (everything: `flush`)."""
        try:
            now = time.monotonic()
            ready = room.flush(now) if flush else room.expire(now)
        except Exception:  # what it holds goes as it came
            self.rlog.error(
                "crosstalk", "stream %s: the cross-talk check failed", room.entry.stream,
                exc_info=True,
            )  # fmt: skip
            ready = room.drain()
        self._add_all(room, ready, rearm=not flush)

    def _add_all(
        self, room: RoomCrossTalk, ready: list[tuple[CaptionEvent, Publication]], rearm: bool = True
    ) -> None:
        """Into the log in order; the room's timer set for its next waiting caption."""
        for cap, pub in ready:
            self._add(room.entry, cap, pub)
        stream = room.entry.stream
        have = self._checks.get(stream)
        if have is None or have[0] is not room:
            return
        if have[1] is not None:
            have[1].cancel()
        due = room.due() if rearm else None
        timer = None
        if due is not None:
            wait = max(0.0, due - time.monotonic())
            timer = asyncio.get_running_loop().call_later(wait, self._settle, room)
        self._checks[stream] = (room, timer)

    def _add(self, entry: StreamEntry, cap: CaptionEvent, pub: Publication) -> None:
        try:
            out = entry.add(cap, pub)
        except Exception:  # one bad event never ends the stream: the rest goes on
            self.rlog.error(
                "deliver", "stream %s: a caption could not be added", entry.stream, exc_info=True
            )
            return
        if self.recording is not None:
            try:
                self.recording.record(entry.log, out)
            except Exception:
                self.rlog.error(
                    "record", "stream %s: recording an event failed", entry.stream, exc_info=True
                )
        if self.sinks is not None and self.sinks.wants(entry.stream):
            self.sinks.offer(renamed(out, entry.names))
        self.metrics.captions.labels(out.type).inc()
        if out.type == "final":
            self.metrics.final_latency.observe(max(0.0, out.latency_ms) / 1000.0)

    def publisher_left(self, stream: str) -> None:
        """A publisher of a room that goes on has gone: whatever the room's cross-talk check
        holds is decided now, with what the microphones said so far, so that the leaving
        publisher's last finals are in the log before its connection says "stopped"."""
        have = self._checks.get(stream)
        if have is not None:
            self._settle(have[0], flush=True)

    def stream_closed(self, stream: str) -> None:
        """The room's last publisher has gone: its recording's file closes, its viewers hear
        it. What its cross-talk check holds is decided first (into the log and the recording)."""
        self._close_check(stream)
        entry = self._live.pop(stream, None)
        if entry is not None:
            _wake(entry)
        if self.recording is not None:
            self.recording.stream_closed(stream)

    def _close_check(self, stream: str) -> None:
        have = self._checks.pop(stream, None)
        if have is None:
            return
        room, timer = have
        if timer is not None:
            timer.cancel()
        self._settle(room, flush=True)
        if room.copies or room.held:
            self.rlog.info(
                "crosstalk",
                "stream %s: %d copies of another participant's speech left out (cross-talk); "
                "%d finals waited for the other microphones, %.1f s at most",
                stream, room.copies, room.held, room.longest_s,
            )  # fmt: skip

    async def close(self, entries: list[StreamEntry]) -> None:
        """At shutdown: what waits in a cross-talk check decided, every recording closed, its
        seq reservation set to the exact last."""
        for stream in list(self._checks):
            self._close_check(stream)
        if self.recording is not None:
            await self.recording.close([e.log for e in entries], CLOSE_TIMEOUT_S)

    async def restore(self, stream: str, max_finals: int) -> Restored | None:
        """The stream's log read back from its recording (None: none), off the event loop."""
        if self.recording is None:
            return None
        return await self.recording.restore(stream, max_finals)

    # ------------------------------------------------------------------ out

    async def older_finals(
        self, stream: str, epoch: str, after: int, through: int
    ) -> list[Caption]:
        """The recorded finals of log `epoch` with `after < seq <= through` (those the log
        has dropped from memory), read off the event loop; [] without `--record`."""
        if self.recording is None or after >= through:
            return []
        try:
            return await self.recording.finals(stream, epoch, after, through)
        except Exception:  # an unreadable recording costs those finals, never the reader
            self.rlog.error(
                "replay", "stream %s: reading the recording back failed", stream, exc_info=True
            )
            return []

    async def replay(
        self, entry: StreamEntry, cursor: int, address: str
    ) -> tuple[list[Sendable], int | None]:
        """What a viewer at `cursor` (from client `address`) is sent next, in seq order: the
        recorded finals the log no longer holds, a chunk at a time, then the log's events.
        Also the seq a next call continues after when this was a chunk of the recording
        (None: this reaches the log's newest event)."""
        clog = entry.log
        through, epoch = clog.dropped_seq, clog.epoch
        if self.recording is None or cursor >= through:
            return list(clog.since(cursor)), None
        try:
            plan = await self.recording.plan(entry.stream, epoch, cursor, through, REPLAY_CHUNK)
            if plan is not None:
                await self._spend(address, plan.nbytes)
                return list(await self.recording.read(plan)), plan.last_seq
        except Exception:  # an unreadable recording costs the replay, never the viewer
            self.rlog.error(
                "replay",
                "stream %s: reading the recording back failed",
                entry.stream,
                exc_info=True,
            )
        # nothing (more) recorded before the log's window: the log's events after the cursor
        return list(clog.since(cursor)), None

    async def _spend(self, address: str, nbytes: int) -> None:
        """Wait until `address` may have `nbytes` more read back for it, and spend them."""
        while (wait := self.budget.wait_s(address, nbytes, time.monotonic())) > 0:
            await asyncio.sleep(wait)
        self.budget.spend(address, nbytes, time.monotonic())


def _wake(entry: StreamEntry) -> None:
    """Wake the stream's viewers (they send what is new, and the publishing state)."""
    for v in entry.viewers:
        v.wake.set()
