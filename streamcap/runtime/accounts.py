"""The inference worker's books: what it did (totals and per stream) and how loaded it is.

Kept apart from the worker's queue and threads: every method is called with the worker's lock
held, and nothing here waits or decodes. Totals are frozen snapshots replaced as jobs are
counted (`jobs.after_job`); per-stream totals are bounded (least recently active dropped first)
so that a server that sees stream after stream for months keeps a fixed amount of bookkeeping;
the load meter (`core.capacity`) is what admission control reads.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import replace

from streamcap.core.capacity import Admission, CapacityConfig, Load, LoadMeter, admit
from streamcap.runtime.jobs import DecodeJob, JobOutcome, StreamStats, WorkerStats, after_job

#: per-stream stats kept (least recently active dropped first)
MAX_STREAM_STATS = 1024


class WorkerAccounts:
    """Totals, per-stream totals and the load meter of one worker (under its lock)."""

    def __init__(self, capacity: CapacityConfig | None = None) -> None:
        self.total = WorkerStats()
        self._streams: OrderedDict[str, StreamStats] = OrderedDict()
        self.streams_seen = 0
        self.meter = LoadMeter(capacity)

    def _stream(self, stream: str) -> StreamStats:
        """``stream``'s totals, now its most recently active."""
        stats = self._streams.get(stream)
        if stats is None:
            stats = self._streams[stream] = StreamStats()
            self.streams_seen += 1
            while len(self._streams) > MAX_STREAM_STATS:
                self._streams.popitem(last=False)
        else:
            self._streams.move_to_end(stream)
        return stats

    def dropped(self, job: DecodeJob) -> None:
        """A job dropped unrun (a stale partial, or a final at a stop without drain)."""
        partial = job.kind == "partial"
        total, mine = self.total, self._stream(job.stream)
        self.total = replace(total, dropped_partials=total.dropped_partials + partial)
        self._streams[job.stream] = replace(mine, dropped_partials=mine.dropped_partials + partial)

    def finished(self, job: DecodeJob, outcome: JobOutcome) -> None:
        """A job run (or failed): totals, the stream's totals, and the load meter."""
        self.total = after_job(self.total, job, outcome)
        self._streams[job.stream] = after_job(self._stream(job.stream), job, outcome)
        if outcome.error is None:
            self.meter.job_done(
                time.monotonic(), job.kind == "final", outcome.compute_s, outcome.queued_s
            )

    def of_stream(self, stream: str) -> StreamStats:
        return self._streams.get(stream, StreamStats())

    def load(self) -> Load:
        return self.meter.load(time.monotonic())

    def admission(self, streams: int, joins_room: bool = False, decoders: int = 1) -> Admission:
        """`core.capacity.admit` on this load, the finals' budget that of ``decoders``."""
        config = self.meter.config
        if decoders != 1:
            config = replace(config, max_finals_load=config.max_finals_load * decoders)
        return admit(self.load(), streams, self.meter.prior, config, joins_room)
