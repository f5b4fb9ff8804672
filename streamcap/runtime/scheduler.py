"""The scheduler core every worker shares: queue, books, admission, drops and the lifecycle.

A worker (`runtime.worker_api.Worker`) is this core plus how a job runs: `InferenceWorker`
decodes on an engine on its own thread (or its owner's, stepped), `cluster.remote.RemoteWorker`
sends each job to a replica and tells its submitter when the reply comes. What the two have in
common lives here once:

- the queue and its rules (`runtime.job_queue`: finals first, in order; one partial waits per
  stream; stale partials dropped), jobs numbered and stamped at `submit`;
- the dropped jobs, told (``on_done`` with ``dropped=True``) by the thread that runs jobs,
  never by `submit`;
- the books (`runtime.accounts`: totals, per-stream totals, the load meter) and admission
  control read from them;
- `idle` and `wait_idle` over every job not yet told, the job thread's start and `stop`.

A subclass gives `engine`, `warm_up` and `_loop` (its job thread), and says which jobs it has
taken from the queue and not yet told (`_taken`); a backend with several decoders says how
many share the finals' load (`_decoders`), one with remote ones overrides `health`, `usable`
and `remote_status`.

Thread contract: `runtime.worker_api`. One condition lock (``_cond``) guards every field here
and the subclass's own; it is held for bookkeeping only, never while a callback or a decode
runs.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Iterable
from dataclasses import replace
from typing import TYPE_CHECKING

from streamcap.runtime.accounts import WorkerAccounts
from streamcap.runtime.costs import CostModel
from streamcap.runtime.job_queue import BatchSize, Coalesce, JobQueue, one_at_a_time
from streamcap.runtime.jobs import DecodeJob, JobOutcome, StreamStats, WorkerStats

if TYPE_CHECKING:
    from typing_extensions import Self

    from streamcap.core.capacity import Admission, CapacityConfig, Load
    from streamcap.runtime.worker_api import ModelInfo
    from streamcap.runtime.worker_status import BatchFigures, RemoteStatus

__all__ = ["Scheduler"]

log = logging.getLogger(__name__)


class Scheduler:
    """The shared core of a worker (module docstring); not a worker by itself."""

    engine: ModelInfo

    def __init__(
        self,
        *,
        name: str,
        capacity: CapacityConfig | None = None,
        costs: CostModel | None = None,
        coalesce: Coalesce | None = None,
    ) -> None:
        self.name = name
        #: measured costs (`runtime.costs`), kept by the thread that runs jobs
        self.costs = costs if costs is not None else CostModel()
        self._cond = threading.Condition()
        #: ``coalesce``: joins a stream's backlog of finals (an owner that completes them)
        self._queue = JobQueue(coalesce=coalesce)
        self._running: list[DecodeJob] = []  # taken by the job thread, not yet told
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._ids = itertools.count(1)
        #: totals, per-stream totals and the load meter (`runtime.accounts`), under the lock
        self._books = WorkerAccounts(capacity)
        self._max_depth = 0

    # ------------------------------------------------------------------ what a backend says

    def _loop(self) -> None:
        """The job thread (`start`): runs until `stop` sets ``_stopping`` and nothing is
        left to run or to tell."""
        raise NotImplementedError

    def _taken(self) -> Iterable[DecodeJob]:
        """Jobs taken from the queue whose submitters are not told yet (lock held)."""
        return self._running

    def _depth(self) -> int:
        """Jobs waiting to run (lock held)."""
        return self._queue.depth

    def _decoders(self) -> int:
        """Decoders sharing the finals' load (admission's budget is per decoder; lock held)."""
        return 1

    def _accepted(self, job: DecodeJob) -> None:
        """``job`` was just queued (lock held)."""

    def _stopped(self) -> None:
        """`stop` is done with the thread (close what the backend opened)."""

    def health(self) -> str:
        """One line for /healthz: a worker whose decoders are its own is fine while it runs."""
        return "ok"

    def usable(self) -> bool:
        """New work has somewhere to go (always, for a worker whose decoders are its own)."""
        return True

    def remote_status(self) -> RemoteStatus | None:
        """No remote decoders to publish (`RemoteWorker` has some)."""
        return None

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> Self:
        """Run `_loop` on a daemon thread until `stop()`."""
        with self._cond:
            if self._thread is None:
                self._stopping = False
                self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
                self._thread.start()
        return self

    def stop(self, timeout: float | None = None, drain: bool = True) -> None:
        """Stop the thread; waiting partials are dropped, and with ``drain`` the finals
        still waiting or running are decoded first (as far as ``timeout`` allows), without it
        dropped too. Dropped jobs hear of it from the job thread before it ends, or here when
        there is no thread to tell them."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            self._count_dropped(self._queue.drop_partials())
            if not drain:
                self._count_dropped(self._queue.drop_finals())
            self._cond.notify_all()
        if drain and self.threaded:
            self.wait_idle(None if deadline is None else max(0.0, deadline - time.monotonic()))
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join(None if deadline is None else max(0.1, deadline - time.monotonic()))
        with self._cond:
            if self._thread is thread and (thread is None or not thread.is_alive()):
                self._thread = None
        if not self.threaded:
            self._deliver_dropped()
        self._stopped()

    @property
    def threaded(self) -> bool:
        """True while the worker's own thread runs jobs (else the caller steps it)."""
        return self._thread is not None and self._thread.is_alive()

    def run_one(self) -> bool:
        raise RuntimeError(f"{self.name} runs on its own thread: it cannot be stepped")

    def run_pending(self) -> int:
        raise RuntimeError(f"{self.name} runs on its own thread: it cannot be stepped")

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ queue

    def submit(self, job: DecodeJob) -> DecodeJob:
        """Queue ``job``; waiting partials it makes stale are dropped, and their ``on_done``
        follows from the thread that runs jobs (never from this call)."""
        with self._cond:
            job.id = next(self._ids)
            job.submitted = time.perf_counter()
            self._count_dropped(self._queue.add(job))
            self._accepted(job)
            self._max_depth = max(self._max_depth, self._queue.depth)
            self._cond.notify_all()
        return job

    @property
    def queue_depth(self) -> int:
        """Jobs waiting (not counting those running or in flight)."""
        with self._cond:
            return self._depth()

    def idle(self, stream: str | None = None) -> bool:
        """Nothing waiting, running or still to be told (for ``stream`` only, if given)."""
        with self._cond:
            return self._idle(stream)

    def _idle(self, stream: str | None) -> bool:
        jobs = itertools.chain(self._queue, self._taken())
        return not any(stream is None or j.stream == stream for j in jobs)

    def wait_idle(self, timeout: float | None = None, stream: str | None = None) -> bool:
        """Block until idle; False on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while not self._idle(stream):
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(left if left is not None else 1.0)
        return True

    def final_cost_s(self) -> float | None:
        """Mean seconds one final costs here, once measured (the prior of `warm_up`, then
        every final run)."""
        return self.costs.job_cost("final")

    # ------------------------------------------------------------------ the job thread's part

    def _has_work(self) -> bool:
        """Something to run or to tell, or a stop to act on (lock held)."""
        return self._stopping or self._queue.has_work() or bool(self._queue.dropped)

    def _next(self, size: BatchSize = one_at_a_time) -> list[DecodeJob]:
        """The job thread's next jobs (now running), after telling the dropped ones: waits
        for work; [] once stopping with nothing left. ``size``: how many of one kind go
        together (`JobQueue.take`)."""
        while True:
            self._deliver_dropped()
            with self._cond:
                idle = not self._has_work()
            if idle:
                self._between_bursts()
            with self._cond:
                while not self._has_work():
                    self._cond.wait()
                if self._queue.dropped:
                    continue  # told outside the lock, before the next job
                self._running = self._queue.take(size)
                return self._running

    def _between_bursts(self) -> None:
        """The job thread found nothing to do (outside the lock; it then waits)."""

    def _finish(self, jobs: list[DecodeJob], outcomes: list[JobOutcome]) -> None:
        """Count the running ``jobs`` in and tell their submitters, one by one."""
        for job, outcome in zip(jobs, outcomes, strict=True):
            with self._cond:
                self._books.finished(job, outcome)
            self._tell(job, outcome)
        with self._cond:
            self._running = []
            self._cond.notify_all()

    def _tell(self, job: DecodeJob, outcome: JobOutcome) -> None:
        try:
            job.on_done(job, outcome)
        except Exception:  # the submitter's bug must not stop every other stream
            log.exception("on_done of a %s job of stream %r failed", job.kind, job.stream)

    def _count_dropped(self, jobs: list[DecodeJob]) -> None:
        """Count ``jobs`` (dropped by the queue, their notices queued) (lock held)."""
        for job in jobs:
            self._books.dropped(job)

    def _deliver_dropped(self) -> None:
        """Tell dropped jobs, in drop order (only the thread that runs jobs calls this)."""
        while True:
            with self._cond:
                if not self._queue.dropped:
                    return
                job = self._queue.dropped[0]  # stays counted (not idle) until told
            try:
                self._tell(job, JobOutcome(dropped=True))
            finally:
                with self._cond:
                    self._queue.dropped.popleft()
                    self._cond.notify_all()

    # ------------------------------------------------------------------ books, admission

    def total_stats(self) -> WorkerStats:
        """Totals over all streams, plus the queue depth now and at most."""
        with self._cond:
            return replace(
                self._books.total,
                queue_depth=self._depth(),
                max_queue_depth=self._max_depth,
                streams=self._books.streams_seen,
            )

    def stream_stats(self, stream: str) -> StreamStats:
        """Totals for one stream, plus its jobs waiting now."""
        with self._cond:
            return replace(self._books.of_stream(stream), queue_depth=self._queue.waiting(stream))

    def batch_figures(self) -> BatchFigures:
        """The decoder batches run and their measured step costs (`CostModel.batch_figures`)."""
        return self.costs.batch_figures()

    def streams_changed(self, streams: int) -> None:
        """The number of live streams on this worker is now ``streams`` (the server says)."""
        with self._cond:
            self._books.meter.streams_changed(time.monotonic(), streams)

    def load(self) -> Load:
        """The measured load over the meter's window."""
        with self._cond:
            return self._books.load()

    def admission(self, streams: int, joins_room: bool = False) -> Admission:
        """May one more publisher join ``streams`` live ones (`core.capacity.admit`, with the
        finals' budget of every decoder)?"""
        with self._cond:
            return self._books.admission(streams, joins_room, self._decoders())

    def _set_prior(self, final_cost_s: float) -> None:
        """Admission's prior: one final costs ``final_cost_s`` (`warm_up` measures it)."""
        with self._cond:
            self._books.meter.set_prior(final_cost_s)
