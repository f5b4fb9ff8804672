"""A stream's captions between the worker, its log, its recording and its readers.

In: captions come from the worker thread through `call_soon_threadsafe`, are numbered into the
room's `CaptionLog` (`hub.StreamEntry.add`, which wakes the viewers), written to the recording
(`record.py`) and counted. Out: what a viewer at a cursor is sent next, and the finals a
subtitle file is made of, with those the log has dropped from memory read back from the
recording (off the event loop). Its own piece because both directions share the one rule of
where a stream's finals are: the newest in memory, all of them on disk.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from streamcap.core.captions import Caption, CaptionEvent

from .hub import Publication, StreamEntry
from .metrics import ServerMetrics
from .ratelog import RateLimitedLog
from .record import Recorder


class Delivery:
    """The captions of one server's streams; `recorder` is None without `--record`."""

    def __init__(
        self, recorder: Recorder | None, metrics: ServerMetrics, rlog: RateLimitedLog
    ) -> None:
        self.recorder = recorder
        self.metrics = metrics
        self.rlog = rlog

    # ------------------------------------------------------------------ in

    def caption_callback(
        self, entry: StreamEntry, pub: Publication
    ) -> Callable[[CaptionEvent], None]:
        """Where `pub`'s pipeline sends its captions (call it on the event loop; the callback
        it returns may be called from any thread)."""
        loop = asyncio.get_running_loop()

        def on_caption(cap: CaptionEvent) -> None:  # worker thread or the loop (feed)
            with contextlib.suppress(RuntimeError):  # the loop is closed at shutdown
                loop.call_soon_threadsafe(self._deliver, entry, cap, pub)

        return on_caption

    def _deliver(self, entry: StreamEntry, cap: CaptionEvent, pub: Publication) -> None:
        try:
            out = entry.add(cap, pub)
        except Exception:  # one bad event never ends the stream: the rest goes on
            self.rlog.error(
                "deliver", "stream %s: a caption could not be added", entry.stream, exc_info=True
            )
            return
        if self.recorder is not None:
            try:
                self.recorder.before_send(entry.log)
                if out.type == "final":
                    self.recorder.write(out)
            except Exception:
                self.rlog.error(
                    "record", "stream %s: recording an event failed", entry.stream, exc_info=True
                )
        self.metrics.captions.labels(out.type).inc()
        if out.type == "final":
            self.metrics.final_latency.observe(max(0.0, out.latency_ms) / 1000.0)

    def stream_closed(self, stream: str) -> None:
        """The room's last publisher has gone: its recording's file closes."""
        if self.recorder is not None:
            self.recorder.close_stream(stream)

    def close(self, entries: list[StreamEntry]) -> None:
        """At shutdown: every recording closed, its seq reservation set to the exact last."""
        if self.recorder is not None:
            self.recorder.close([e.log for e in entries])

    # ------------------------------------------------------------------ out

    def older_finals(self, entry: StreamEntry, after: int) -> Callable[[], list[Caption]] | None:
        """A blocking read (run it off the loop) of the recorded finals with a seq above `after`
        that the stream's log has dropped from memory as of now; None when there are none to
        read (nothing dropped past `after`, or no `--record`)."""
        through, epoch, recorder = entry.log.dropped_seq, entry.log.epoch, self.recorder
        if recorder is None or after >= through:
            return None
        return lambda: recorder.finals(entry.stream, epoch, after, through)

    async def replay(self, entry: StreamEntry, cursor: int) -> list[Caption]:
        """What a viewer at `cursor` is sent next, in seq order: the log's events after it, and
        before them the recorded finals the log no longer holds (read off the event loop)."""
        older = self.older_finals(entry, cursor)
        events = entry.log.since(cursor)
        if older is None:
            return events
        try:
            back = await asyncio.to_thread(older)
        except Exception:  # an unreadable recording costs the replay, never the viewer
            self.rlog.error(
                "replay",
                "stream %s: reading the recording back failed",
                entry.stream,
                exc_info=True,
            )
            back = []
        return sorted(back + events, key=lambda c: c.seq)
