"""Streams and their viewers, owned by the server's event loop (no locks: one thread only).

Each stream id has one `StreamEntry`: a `CaptionLog` that outlives publisher sessions (a
publisher that reconnects continues the same `seq`), the connected viewers, and its publishers.
A stream is a *room*: several named publishers (`speaker`) may publish into it at once, each
with its own pipeline (segment numbers and times from zero), and the entry maps each one's
events into the room's one sequence: segments numbered in the order they first appear, times on
the room's clock, the publisher's name on every event.

Viewers are cursors into the log, not queues: a viewer's sender sends `log.since(cursor)`
whenever it wakes. A slow viewer therefore never blocks anyone, costs no
memory while it lags (it skips partials that newer ones replaced, never a final), and a stuck one
is closed by the send timeout; it can reconnect with `since=` and miss nothing.

Ended streams are kept for replay and SRT/VTT, the oldest dropped beyond `retain` so a server
running for weeks does not grow. With a `restore` function (`--record DIR`), a stream that is
not in memory is read back from its recording when first asked for (`open`), so its log, seq,
segment numbers and times continue across server restarts and trimming. That read runs off the
event loop (a long recording held every stream for seconds: red-team round 4, bug 3), and
requests that come together while it runs share it.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace

from streamcap.core.captions import Caption, CaptionEvent, CaptionLog

from .record import Restored, new_epoch


@dataclass(frozen=True)
class HubFigures:
    """The streams and viewers in memory as of one moment (`Hub.figures`, read by
    `server.metrics`)."""

    streams: int = 0  # rooms with a publisher connected
    publishers: int = 0  # over all rooms
    viewers: int = 0
    retained: int = 0  # entries kept in memory, live and ended
    finals_in_memory: int = 0  # caption events the logs hold in memory


class Viewer:
    """One /captions connection: where it is in the log, and a wake-up flag."""

    __slots__ = ("closing", "cursor", "wake")

    def __init__(self, since: int) -> None:
        self.cursor = since
        self.wake = asyncio.Event()
        #: Set at shutdown: send what is left, then close.
        self.closing = False


#: Segment numbers a publication remembers (its pipeline's recent segments).
_SEGMENT_MEMORY = 64


@dataclass(eq=False)
class Publication:
    """One publisher session's place in its room: its name, where its pipeline's time zero
    lies on the room's clock, and its segment numbers in the room's numbering."""

    speaker: str
    time_offset: float
    segments: dict[int, int] = field(default_factory=dict)
    #: Where its microphone heard no speech, on its pipeline's clock (`StreamProtocol.quiet`,
    #: read when asked, from any thread); None: not known. The room's cross-talk check decides
    #: a caption at once when no other publisher can have been speaking then (`rooms.py`).
    quiet: Callable[[], tuple[float, float]] | None = None


@dataclass
class StreamEntry:
    """Everything the server knows about one stream id (a room)."""

    stream: str
    log: CaptionLog
    viewers: set[Viewer] = field(default_factory=set)
    publications: list[Publication] = field(default_factory=list)
    sessions: int = 0
    next_segment: int = 0
    #: The room's content so far ends here (seconds on its clock; the next session alone in the
    #: room starts here, so times keep increasing across reconnects).
    audio_s: float = 0.0
    created: float = field(default_factory=time.time)
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    #: Read back from `--record DIR` (it had a publisher in an earlier run).
    restored: bool = False
    #: The room's clock while publishers are in it: `audio_s` when the first came, at
    #: `clock_start` (monotonic seconds).
    clock_base: float = 0.0
    clock_start: float = 0.0
    #: The names its labels are shown with (label -> name, `core.speaker_names`): a rename
    #: changes this map, never a caption (`names.py`). `names_version` counts its changes: a
    #: viewer told version N has the map of version N.
    names: dict[str, str] = field(default_factory=dict)
    names_version: int = 0
    #: The pace of its captions' partials (`core.load_shed.Pace` value: "live", "thinned",
    #: "paused") and how many seconds behind the stream is, as its pipeline last said: a
    #: viewer with `status=1` is told when the pace changes (the overlay says it is behind).
    pace: str = "live"
    behind_s: float = 0.0

    @property
    def publishing(self) -> bool:
        return bool(self.publications)

    @property
    def speakers(self) -> list[str]:
        """The names of the publishers now in the room ("" for an unnamed one)."""
        return [p.speaker for p in self.publications]

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
            names=dict(rec.names),
            names_version=1 if rec.names else 0,
        )

    def rename(self, names: dict[str, str]) -> None:
        """The labels are shown with ``names`` from now on; the viewers are woken (those
        who asked are sent the new map: `viewers.py`)."""
        self.names = names
        self.names_version += 1
        for v in self.viewers:
            v.wake.set()

    def begin_session(self, speaker: str = "", now: float | None = None) -> Publication:
        """A publisher starts: alone, its time zero is where the room's content ends; with
        others, it is the room's clock now (`now`: monotonic seconds)."""
        now = time.monotonic() if now is None else now
        if not self.publications:
            self.clock_base, self.clock_start = self.audio_s, now
        pub = Publication(speaker, self.clock_base + (now - self.clock_start))
        self.publications.append(pub)
        self.sessions += 1
        self.ended.clear()
        return pub

    def end_session(self, pub: Publication, audio_s: float) -> None:
        """`pub`'s publisher has gone after `audio_s` seconds of audio."""
        if pub in self.publications:
            self.publications.remove(pub)
        self.audio_s = max(self.audio_s, pub.time_offset + audio_s)
        if not self.publications:
            self.ended.set()

    def add(self, event: CaptionEvent, pub: Publication) -> Caption:
        """Number a pipeline caption of `pub`'s publisher into this room's log (its one
        sequence) and wake the viewers."""
        segment = pub.segments.get(event.segment)
        if segment is None:
            segment = pub.segments[event.segment] = self.next_segment
            self.next_segment += 1
            for old in sorted(pub.segments)[:-_SEGMENT_MEMORY]:
                del pub.segments[old]
        moved = event.shifted(segment - event.segment, pub.time_offset)
        if pub.speaker:
            moved = replace(moved, speaker=pub.speaker)
        out = self.log.add(moved)
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
        restore: Callable[[str], Awaitable[Restored | None]] | None = None,
    ) -> None:
        self.retain = retain
        self.max_finals = max_finals
        self._restore = restore
        self._streams: OrderedDict[str, StreamEntry] = OrderedDict()
        #: reads of recordings under way, one per stream (`open`)
        self._loading: dict[str, asyncio.Future[StreamEntry | None]] = {}

    def __contains__(self, stream: str) -> bool:
        return stream in self._streams

    def get(self, stream: str) -> StreamEntry | None:
        """The stream's entry if it is in memory, else None (`open` reads a recording back)."""
        return self._streams.get(stream)

    async def open(self, stream: str) -> StreamEntry | None:
        """The stream's entry if it is in memory or recorded (then read back, off the event
        loop; requests that come while it is read share the read), else None."""
        e = self._streams.get(stream)
        if e is not None or self._restore is None:
            return e
        loading = self._loading.get(stream)
        if loading is None:
            loading = self._loading[stream] = asyncio.ensure_future(self._load(stream))
        # shielded: a request that gives up does not cancel the others' read
        return await asyncio.shield(loading)

    async def _load(self, stream: str) -> StreamEntry | None:
        assert self._restore is not None
        try:
            rec = await self._restore(stream)
        finally:
            del self._loading[stream]
        e = self._streams.get(stream)  # created while it was read: that one is the stream
        if e is None and rec is not None:
            e = self._streams[stream] = StreamEntry.from_recording(stream, rec)
            self._trim(keep=stream)
        return e

    def entry(self, stream: str, found: StreamEntry | None = None) -> StreamEntry:
        """The stream's entry, created (and older ended ones dropped) if needed; `found` is
        what `open` returned for it (put back if it was dropped from memory since)."""
        e = self._streams.get(stream)
        if e is None:
            if found is None:
                log = CaptionLog(stream, max_finals=self.max_finals, epoch=new_epoch())
                found = StreamEntry(stream, log)
            e = self._streams[stream] = found
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
    def rooms_publishing(self) -> int:
        """Streams (rooms) with at least one publisher connected."""
        return sum(1 for e in self._streams.values() if e.publishing)

    @property
    def publishing(self) -> int:
        """Publishers connected, over all rooms."""
        return sum(len(e.publications) for e in self._streams.values())

    @property
    def viewers(self) -> int:
        return sum(len(e.viewers) for e in self._streams.values())

    def figures(self) -> HubFigures:
        """What /metrics publishes of the streams (`server.metrics`), counted now."""
        return HubFigures(
            streams=self.rooms_publishing,
            publishers=self.publishing,
            viewers=self.viewers,
            retained=len(self._streams),
            finals_in_memory=sum(len(e.log) for e in self._streams.values()),
        )

    def entries(self) -> list[StreamEntry]:
        return list(self._streams.values())

    def behind(self) -> str | None:
        """Which live stream is furthest behind, in words, among those whose partials load
        shedding paused (`core.load_shed`): a worker that has nothing left for them has none
        for another publisher (issue 38); None when none is."""
        late = [e for e in self._streams.values() if e.publishing and e.pace == "paused"]
        if not late:
            return None
        worst = max(late, key=lambda e: e.behind_s)
        return (
            f"stream {worst.stream} is {worst.behind_s:.1f} s behind now (its partials "
            "paused): the worker cannot take one more"
        )

    def live_viewers(self) -> list[tuple[StreamEntry, Viewer]]:
        return [(e, v) for e in self._streams.values() for v in e.viewers]
