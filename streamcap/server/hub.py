"""Streams and their viewers, owned by the server's event loop (no locks: one thread only).

Each stream id has one `StreamEntry`: a `CaptionLog` that outlives publisher sessions (a
publisher that reconnects continues the same `seq`), the connected viewers, and at most one
publisher. Viewers are cursors into the log, not queues: a viewer's sender sends
`log.since(cursor)` whenever it wakes. A slow viewer therefore never blocks anyone, costs no
memory while it lags (it skips partials that newer ones replaced, never a final), and a stuck one
is closed by the send timeout; it can reconnect with `since=` and miss nothing.

Ended streams are kept for replay and SRT/VTT, the oldest dropped beyond `retain` so a server
running for weeks does not grow. With a `restore` function (`--record DIR`), a stream that is
not in memory is read back from its recording when first asked for, so its log, seq, segment
numbers and times continue across server restarts and trimming.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from streamcap.core.captions import Caption, CaptionEvent, CaptionLog

from .record import Restored, new_epoch


class Viewer:
    """One /captions connection: where it is in the log, and a wake-up flag."""

    __slots__ = ("closing", "cursor", "wake")

    def __init__(self, since: int) -> None:
        self.cursor = since
        self.wake = asyncio.Event()
        #: Set at shutdown: send what is left, then close.
        self.closing = False


@dataclass
class StreamEntry:
    """Everything the server knows about one stream id."""

    stream: str
    log: CaptionLog
    viewers: set[Viewer] = field(default_factory=set)
    publishing: bool = False
    sessions: int = 0
    #: Added to segment numbers and times of the current publisher session, so that they keep
    #: increasing across reconnects (the pipeline restarts both at zero per session).
    segment_offset: int = 0
    time_offset: float = 0.0
    next_segment: int = 0
    audio_s: float = 0.0
    created: float = field(default_factory=time.time)
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    #: Read back from `--record DIR` (it had a publisher in an earlier run).
    restored: bool = False

    @property
    def started(self) -> bool:
        """A publisher has sent `start` at least once, in this run or a recorded one (waiting
        viewers alone do not count)."""
        return self.sessions > 0 or self.restored

    @classmethod
    def from_recording(cls, stream: str, rec: Restored) -> StreamEntry:
        return cls(
            stream,
            rec.log,
            next_segment=rec.next_segment,
            audio_s=rec.audio_s,
            restored=True,
        )

    def begin_session(self) -> None:
        self.publishing = True
        self.sessions += 1
        self.segment_offset = self.next_segment
        self.time_offset = self.audio_s
        self.ended.clear()

    def end_session(self, audio_s: float) -> None:
        self.publishing = False
        self.audio_s = self.time_offset + audio_s
        self.ended.set()

    def add(self, event: CaptionEvent) -> Caption:
        """Number a pipeline caption into this stream's log (the stream's one sequence) and
        wake the viewers."""
        out = self.log.add(event.shifted(self.segment_offset, self.time_offset))
        self.next_segment = max(self.next_segment, out.segment + 1)
        for v in self.viewers:
            v.wake.set()
        return out


class Hub:
    """Stream registry with limits; see the module docstring."""

    def __init__(
        self,
        *,
        retain: int = 64,
        max_finals: int = 10_000,
        restore: Callable[[str], Restored | None] | None = None,
    ) -> None:
        self.retain = retain
        self.max_finals = max_finals
        self._restore = restore
        self._streams: OrderedDict[str, StreamEntry] = OrderedDict()

    def __contains__(self, stream: str) -> bool:
        return stream in self._streams

    def get(self, stream: str) -> StreamEntry | None:
        """The stream's entry if it is in memory or recorded (then read back), else None."""
        e = self._streams.get(stream)
        if e is None and self._restore is not None:
            rec = self._restore(stream)
            if rec is not None:
                e = self._streams[stream] = StreamEntry.from_recording(stream, rec)
                self._trim(keep=stream)
        return e

    def entry(self, stream: str) -> StreamEntry:
        """The stream's entry, created (and older ended ones dropped) if needed."""
        e = self.get(stream)
        if e is None:
            log = CaptionLog(stream, max_finals=self.max_finals, epoch=new_epoch())
            e = StreamEntry(stream, log)
            self._streams[stream] = e
        self._streams.move_to_end(stream)
        self._trim(keep=stream)
        return e

    def _trim(self, keep: str | None = None) -> None:
        idle = [
            s for s, e in self._streams.items() if not e.publishing and not e.viewers and s != keep
        ]
        for s in idle[: max(0, len(self._streams) - self.retain)]:
            del self._streams[s]

    def release(self, e: StreamEntry) -> None:
        """Drop an entry nobody uses that never held captions (e.g. a viewer gave up waiting)."""
        if not e.publishing and not e.viewers and not e.started:
            self._streams.pop(e.stream, None)
        else:
            self._trim()

    @property
    def publishing(self) -> int:
        return sum(1 for e in self._streams.values() if e.publishing)

    @property
    def viewers(self) -> int:
        return sum(len(e.viewers) for e in self._streams.values())

    def snapshot(self) -> dict[str, float]:
        return {
            "streams": self.publishing,
            "viewers": self.viewers,
            "retained": len(self._streams),
        }

    def entries(self) -> list[StreamEntry]:
        return list(self._streams.values())

    def live_viewers(self) -> list[tuple[StreamEntry, Viewer]]:
        return [(e, v) for e in self._streams.values() for v in e.viewers]
