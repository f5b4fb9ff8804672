"""The driver of the caption sinks: each sink its own asyncio task and its own bounded queue.

`SinkRunner.offer` is called on the server's event loop for every caption added to a stream's
log (`server.delivery.Delivery`); it never waits and never raises. It puts the caption in the
queue of each sink of that stream and wakes its task, which calls the sink's `deliver` for one
caption at a time, in order. So a sink that never answers stalls its own queue only: the
stream's viewers, the other streams and the other sinks go on (tests/sinks/test_isolation.py
measures it).

A queue holds at most `QUEUE_FINALS` finals. One more final and the oldest waiting one is
dropped, logged (at most every `LOG_EVERY_S` per sink, with how many) and counted
(``streamcap_sink_finals_dropped{reason="queue_full"}``): for live captions the newest text is
worth more than a backlog. Partials, for sinks that want them, coalesce: one waits at most, a
newer one replaces it (counted as ``coalesced``), and a final of the same segment takes its
place. At shutdown (`aclose`) the queues get a moment to drain; what is left is counted as
dropped (``shutdown``).

The counts are read at scrape time (`figures`, one frozen snapshot per sink), as the server's
other figures are (`server.metrics`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

from streamcap.core.captions import Caption

from .base import CaptionSink, SinkError

__all__ = ["SinkFigures", "SinkRunner"]

log = logging.getLogger("streamcap.sinks")

#: Finals one sink's queue holds before the oldest waiting one is dropped.
QUEUE_FINALS = 256
#: A sink's dropped finals and failures are logged at most this often (with a count).
LOG_EVERY_S = 30.0
#: At shutdown, how long the sinks get to deliver what waits, and then to close.
CLOSE_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class SinkFigures:
    """One sink as a scrape sees it: delivered, failed and dropped captions, and the queue."""

    name: str  # "youtube:main": kind and stream, never the target
    kind: str
    stream: str
    delivered_finals: int = 0
    delivered_partials: int = 0
    failed_finals: int = 0
    failed_partials: int = 0
    dropped_queue_full: int = 0  # finals dropped because the queue was full
    dropped_shutdown: int = 0  # finals still waiting when the server closed
    coalesced_partials: int = 0  # partials replaced by a newer one before delivery
    waiting: int = 0  # captions in the queue now (finals and the partial)
    busy_s: float = 0.0  # how long the delivery under way has taken so far (0: none)


class _Lane:
    """One sink's queue, task and counts (owned by the event loop)."""

    def __init__(self, sink: CaptionSink, kind: str, stream: str, max_finals: int) -> None:
        self.sink = sink
        self.kind = kind
        self.stream = stream
        self.max_finals = max_finals
        self.finals: deque[Caption] = deque()
        self.partial: Caption | None = None
        self.wake: asyncio.Event | None = None
        self.task: asyncio.Task[None] | None = None
        self.closing = False
        self.busy_since: float | None = None
        self.counts = dict.fromkeys(
            ("delivered_final", "delivered_partial", "failed_final", "failed_partial",
             "dropped_queue_full", "dropped_shutdown", "coalesced_partials"), 0,
        )  # fmt: skip
        #: per kind of trouble: when it was last logged, and how many since
        self._logged: dict[str, tuple[float, int]] = {}

    @property
    def name(self) -> str:
        return str(self.sink.name)

    def put(self, caption: Caption) -> None:
        if caption.type == "final":
            if self.partial is not None and self.partial.segment == caption.segment:
                self.partial = None  # the final says what the partial was saying
            if len(self.finals) >= self.max_finals:
                dropped = self.finals.popleft()
                self.counts["dropped_queue_full"] += 1
                self.trouble(
                    "full", "caption sink %s is %d finals behind: the oldest waiting final "
                    "(seq %d) is dropped", self.name, len(self.finals) + 1, dropped.seq,
                )  # fmt: skip
            self.finals.append(caption)
        elif self.sink.wants_partials:
            if self.partial is not None:
                self.counts["coalesced_partials"] += 1
            self.partial = caption
        else:
            return
        if self.wake is not None:
            self.wake.set()

    def take(self) -> Caption | None:
        """The next caption in seq order (a waiting partial goes before later finals)."""
        if self.partial is not None and (not self.finals or self.partial.seq < self.finals[0].seq):
            cap, self.partial = self.partial, None
            return cap
        return self.finals.popleft() if self.finals else None

    @property
    def waiting(self) -> int:
        return len(self.finals) + (self.partial is not None)

    def trouble(self, what: str, msg: str, *args: object) -> None:
        """Log a warning at most every `LOG_EVERY_S` for this sink and `what`, with how many
        times it happened since the last line."""
        now = time.monotonic()
        last, since = self._logged.get(what, (-float("inf"), 0))
        if now - last < LOG_EVERY_S:
            self._logged[what] = (last, since + 1)
            return
        more = f" ({since} more since the last such line)" if since else ""
        log.warning(msg + more, *args)
        self._logged[what] = (now, 0)

    def figures(self) -> SinkFigures:
        c = self.counts
        busy = time.monotonic() - self.busy_since if self.busy_since is not None else 0.0
        return SinkFigures(
            self.name, self.kind, self.stream,
            delivered_finals=c["delivered_final"], delivered_partials=c["delivered_partial"],
            failed_finals=c["failed_final"], failed_partials=c["failed_partial"],
            dropped_queue_full=c["dropped_queue_full"], dropped_shutdown=c["dropped_shutdown"],
            coalesced_partials=c["coalesced_partials"], waiting=self.waiting, busy_s=busy,
        )  # fmt: skip

    async def run(self) -> None:
        assert self.wake is not None
        while True:
            cap = self.take()
            if cap is None:
                if self.closing:
                    return
                self.wake.clear()
                await self.wake.wait()
                continue
            self.busy_since = time.monotonic()
            try:
                await self.sink.deliver(cap)
            except asyncio.CancelledError:
                if cap.type == "final":
                    self.counts["dropped_shutdown"] += 1
                raise
            except Exception as e:  # a sink's failure is its own: log, count, go on
                self.counts[f"failed_{cap.type}"] += 1
                why = str(e) if isinstance(e, SinkError) else type(e).__name__  # no secrets
                self.trouble(
                    "failed", "caption sink %s: a %s (seq %d) was not delivered: %s",
                    self.name, cap.type, cap.seq, why,
                )  # fmt: skip
            else:
                self.counts[f"delivered_{cap.type}"] += 1
            finally:
                self.busy_since = None


class SinkRunner:
    """The sinks of a server's streams (see the module docstring). ``sinks`` are (kind,
    stream, sink): the kind is the registered name (`registry.register_sink`), the stream the
    one whose captions the sink gets."""

    def __init__(
        self,
        sinks: Iterable[tuple[str, str, CaptionSink]] = (),
        *,
        max_finals: int = QUEUE_FINALS,
        close_timeout_s: float = CLOSE_TIMEOUT_S,
    ) -> None:
        if max_finals < 1:
            raise ValueError(f"max_finals must be at least 1, got {max_finals}")
        self.close_timeout_s = close_timeout_s
        self._lanes: list[_Lane] = [_Lane(s, k, st, max_finals) for k, st, s in sinks]
        self._by_stream: dict[str, list[_Lane]] = {}
        for lane in self._lanes:
            self._by_stream.setdefault(lane.stream, []).append(lane)
        self._started = False

    def __len__(self) -> int:
        return len(self._lanes)

    def wants(self, stream: str) -> bool:
        """Whether any sink takes `stream`'s captions (the caller skips work when not)."""
        return stream in self._by_stream

    def start(self) -> None:
        """One task per sink (on the running loop); captions offered before wait for it."""
        if self._started:
            return
        self._started = True
        for lane in self._lanes:
            lane.wake = asyncio.Event()
            if lane.waiting:
                lane.wake.set()
            lane.task = asyncio.ensure_future(lane.run())
            lane.task.add_done_callback(_report_crash)

    def offer(self, caption: Caption) -> None:
        """Queue `caption` for each sink of its stream (event loop only; never waits)."""
        for lane in self._by_stream.get(caption.stream, ()):
            try:
                lane.put(caption)
            except Exception:  # a bug here must never cost the stream its caption
                log.exception("caption sink %s: queueing failed", lane.name)

    def figures(self) -> list[SinkFigures]:
        """Each sink as of now, for /metrics."""
        return [lane.figures() for lane in self._lanes]

    async def aclose(self) -> None:
        """Let each sink deliver what waits (within `close_timeout_s` in all), stop its task,
        then close it (each within `close_timeout_s`)."""
        for lane in self._lanes:
            lane.closing = True
            if lane.wake is not None:
                lane.wake.set()
        tasks = [lane.task for lane in self._lanes if lane.task is not None]
        if tasks:
            await asyncio.wait(tasks, timeout=self.close_timeout_s)
        for lane in self._lanes:
            if lane.task is not None and not lane.task.done():
                lane.task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await lane.task
            left = len(lane.finals)
            lane.finals.clear()
            lane.partial = None
            lane.counts["dropped_shutdown"] += left
            dropped = lane.counts["dropped_shutdown"]
            if dropped:
                log.warning(
                    "caption sink %s: %d finals not delivered at shutdown", lane.name, dropped
                )
            try:
                await asyncio.wait_for(lane.sink.aclose(), self.close_timeout_s)
            except Exception as e:  # incl. a timeout: the server closes all the same
                why = str(e) if isinstance(e, SinkError) else type(e).__name__
                log.warning("caption sink %s: closing failed: %s", lane.name, why)


def _report_crash(task: asyncio.Task[None]) -> None:
    """A lane's task that ended by a bug (not a sink's failure: those are caught)."""
    if not task.cancelled() and task.exception() is not None:
        log.error("a caption sink's task ended: %s", type(task.exception()).__name__)
