"""The inference worker: one thread owns the engine and serves decode jobs from many streams.

Scheduler rules (DESIGN.md; `runtime.job_queue`, which the remote backend's gateway shares):
finals before partials, in order, never dropped; at most one partial waits per stream (a newer
one drops the older, a final drops its stream's older ones); among streams the partial waiting
longest goes first.

Partials may use a shortened encoder context (`DecodeJob.context_s`, `Engine.encode`'s
whisper.cpp-style "audio context": the audio plus a margin); the encoder's cost falls in
proportion. Finals (``context_s=None``) always use the model's standard 30 s input, so they are
exact.

Batching. On its own thread, when several jobs of one kind wait, the worker takes as many as
its cost model (`runtime.costs`, kept up to date from every job it runs) says pay to decode
together, and runs them as one batch (`runtime.batching`): decoder steps in lockstep, each
row still its batch-1 greedy, token for token; a final's encoder call always alone.

The worker runs either on its own thread (`start()`), or is stepped by its caller
(`run_one()`, `run_pending()`, one job at a time): the simulated clock replays a file that
way, so that jobs start exactly when a single processor would have been free.

Thread contract. The worker's state is guarded by one condition lock, held only for queue and
counter bookkeeping, never while a callback or a decode runs.
- Any thread may call `submit`, `queue_depth`, `idle`, `wait_idle`, `total_stats`,
  `stream_stats`, `text_to_ids` and `stop`. `submit` never runs a callback: the jobs it drops
  are queued, and their ``on_done`` is delivered later by the thread that runs jobs. So a
  feeder (the server's event loop) is never re-entered from inside its own `submit`.
- Callbacks (``prepare``, ``on_done`` of run and of dropped jobs) run on the worker's thread
  while it runs; on a worker without a thread they run in the thread that steps it
  (`run_one`, `run_pending`, `wait_idle`, and `stop`, which then tells the dropped jobs
  itself). They may call `submit`.
- `start`, `run_one` and `run_pending` belong to one owner: stepping a worker whose thread
  runs is an error.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import threading
import time
from dataclasses import replace

import numpy as np

from streamcap.core.capacity import Admission, CapacityConfig, Load
from streamcap.core.constants import ENCODER_POSITIONS_PER_S, SAMPLE_RATE
from streamcap.decoding.options import DecodingOptions
from streamcap.runtime.accounts import WorkerAccounts
from streamcap.runtime.batching import BatchRunner, can_batch
from streamcap.runtime.clock import Measurement
from streamcap.runtime.coalesce import complete_parts
from streamcap.runtime.costs import CostModel, CostModelConfig
from streamcap.runtime.engine import Encoded, Engine, with_words
from streamcap.runtime.job_queue import JobQueue
from streamcap.runtime.jobs import (
    Coalesced,
    DecodeJob,
    JobKind,
    JobOutcome,
    StreamStats,
    WorkerStats,
)
from streamcap.runtime.memory import HeapTrimmer

__all__ = [
    "DecodeJob",
    "InferenceWorker",
    "JobKind",
    "JobOutcome",
    "StreamStats",
    "WorkerStats",
    "encode_window",
]

log = logging.getLogger(__name__)


def encode_window(engine: Engine, audio: np.ndarray, context_s: float | None = None) -> Encoded:
    """Log-mel + encoder; ``context_s`` < 30 s shortens the encoder context (partials only)."""
    return engine.encode(audio, context_s=context_s)


class InferenceWorker:
    """Owns ``engine``; decodes jobs from any number of streams (see the module docstring)."""

    def __init__(
        self,
        engine: Engine,
        *,
        name: str = "streamcap-worker",
        capacity: CapacityConfig | None = None,
        max_batch: int = 8,
    ) -> None:
        self.engine = engine
        self.name = name
        self._cond = threading.Condition()
        self._queue = JobQueue(coalesce=True)  # it completes joined finals (`_execute`)
        self._running: list[DecodeJob] = []
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._ids = itertools.count(1)
        self._heap = HeapTrimmer()
        #: totals, per-stream totals and the load meter (`runtime.accounts`), under the lock
        self._books = WorkerAccounts(capacity)
        self._max_depth = 0
        #: measured cost per batch size (`runtime.costs`), kept by the thread that runs jobs
        self.costs = CostModel(CostModelConfig(max_batch=max(1, max_batch)))
        self._batcher: BatchRunner | None = None  # made at the first batch
        self._batchable: bool | None = None

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> InferenceWorker:
        """Run jobs on a daemon thread until `stop()`."""
        with self._cond:
            if self._thread is not None:
                return self
            self._stopping = False
            self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout: float | None = None, drain: bool = True) -> None:
        """Stop the thread; with ``drain`` the finals still queued are decoded first.

        Waiting partials are dropped (their ``on_done`` hears of it: from the worker's thread
        before it ends, or here when there is no thread to do it).
        """
        with self._cond:
            thread = self._thread
            self._stopping = True
            self._count_dropped(self._queue.drop_partials())
            if not drain:
                self._count_dropped(self._queue.drop_finals())
            self._cond.notify_all()
        if thread is not None:
            thread.join(timeout)
        with self._cond:
            if self._thread is thread and (thread is None or not thread.is_alive()):
                self._thread = None
        if not self.threaded:
            self._deliver_dropped()

    @property
    def threaded(self) -> bool:
        """True while the worker's own thread runs jobs (else the caller steps it)."""
        return self._thread is not None and self._thread.is_alive()

    def __enter__(self) -> InferenceWorker:
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
            self._max_depth = max(self._max_depth, self._depth())
            self._cond.notify_all()
        return job

    def _depth(self) -> int:
        return self._queue.depth

    @property
    def queue_depth(self) -> int:
        """Jobs waiting (not counting the one running)."""
        with self._cond:
            return self._depth()

    def idle(self, stream: str | None = None) -> bool:
        """Nothing waiting, running or still to be told of a drop (for ``stream`` only, if
        given)."""
        with self._cond:
            return self._idle(stream)

    def _idle(self, stream: str | None) -> bool:
        jobs = [*self._queue, *self._running]
        return not any(stream is None or j.stream == stream for j in jobs)

    def wait_idle(self, timeout: float | None = None, stream: str | None = None) -> bool:
        """Block until idle (runs the jobs itself when no thread is started)."""
        if not self.threaded:
            self.run_pending()
            return self.idle(stream)
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while not self._idle(stream):
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def _take(self, batch: bool = False) -> list[DecodeJob]:
        """The next jobs to run (caller holds the lock), by the queue's rules; with ``batch``,
        as many of one kind as the cost model says pay to decode together."""
        return self._queue.take(self._batch_size if batch else lambda n, kind: 1)

    def _batch_size(self, waiting: int, kind: JobKind) -> int:
        if self._batchable is None:
            self._batchable = can_batch(self.engine)
        if waiting < 2 or self.costs.config.max_batch < 2 or not self._batchable:
            return 1
        return self.costs.decoder_batch(waiting, kind)

    def _count_dropped(self, jobs: list[DecodeJob]) -> None:
        """Count ``jobs`` (dropped by the queue, their notices queued) (caller holds the
        lock)."""
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
                job.on_done(job, JobOutcome(dropped=True))
            except Exception:
                log.exception("on_done of a dropped job of stream %r failed", job.stream)
            finally:
                with self._cond:
                    self._queue.dropped.popleft()
                    self._cond.notify_all()

    # ------------------------------------------------------------------ running

    def run_one(self) -> bool:
        """Tell dropped jobs, then run the next job in the calling thread; False when there
        was none."""
        if self.threaded:
            raise RuntimeError("the worker thread is running: do not step it")
        self._deliver_dropped()
        with self._cond:
            jobs = self._take()
            if not jobs:
                return False
            self._running = jobs
        self._run(jobs[0])
        self._deliver_dropped()  # what its ``on_done`` made stale
        return True

    def run_pending(self) -> int:
        """Run jobs in the calling thread until the queue is empty; returns how many ran."""
        n = 0
        while self.run_one():
            n += 1
        return n

    def _loop(self) -> None:
        while True:
            self._deliver_dropped()
            with self._cond:
                idle = not (self._stopping or self._queue.has_work() or self._queue.dropped)
            if idle:  # between bursts of work: give the heap's free pages back (issue 25)
                self._heap.idle()
            with self._cond:
                while not (self._stopping or self._queue.has_work() or self._queue.dropped):
                    self._cond.wait()
                if self._queue.dropped:
                    continue  # told outside the lock, before the next job
                jobs = self._take(batch=True)
                if not jobs:  # stopping, drained, every drop told
                    return
                self._running = jobs
            if len(jobs) == 1:
                self._run(jobs[0])
            else:
                self._run_batch(jobs)
            self._heap.worked()

    def _run(self, job: DecodeJob) -> None:
        outcome = JobOutcome(queued_s=time.perf_counter() - job.submitted)
        try:
            outcome = self._execute(job, outcome)
        except Exception as e:  # a bad job must not kill the worker
            outcome.error = e
        self._finish(job, outcome)
        with self._cond:
            self._running = []
            self._cond.notify_all()

    def _run_batch(self, jobs: list[DecodeJob]) -> None:
        """Run several jobs as one batch (`runtime.batching`); each is told on its own."""
        now = time.perf_counter()
        outcomes = [JobOutcome(queued_s=now - j.submitted) for j in jobs]
        ready: list[int] = []
        prepared: list[tuple[DecodingOptions, tuple[int, ...] | None]] = []
        for i, job in enumerate(jobs):
            try:
                options, hypothesis = job.options, job.hypothesis
                if job.prepare is not None:
                    options, hypothesis = job.prepare()
                prepared.append((options, tuple(hypothesis) if hypothesis else None))
                ready.append(i)
            except Exception as e:  # a bad job must not fail the others
                outcomes[i].error = e
        try:
            if self._batcher is None:
                self._batcher = BatchRunner(self.engine, self.costs)
            self._batcher.run([jobs[i] for i in ready], prepared, [outcomes[i] for i in ready])
        except Exception as e:  # the batch failed: every job in it hears of it
            for i in ready:
                outcomes[i].error = e
        for job, outcome in zip(jobs, outcomes, strict=True):
            self._finish(job, outcome)
        with self._cond:
            self._running = []
            self._cond.notify_all()

    def _finish(self, job: DecodeJob, outcome: JobOutcome) -> None:
        """Count a job in and tell its submitter."""
        with self._cond:
            self._books.finished(job, outcome)
        try:
            job.on_done(job, outcome)
        except Exception:  # the submitter's bug must not stop every other stream
            log.exception("on_done of a %s job of stream %r failed", job.kind, job.stream)

    def _execute(self, job: DecodeJob, outcome: JobOutcome) -> JobOutcome:
        options, hypothesis = job.options, job.hypothesis
        if job.prepare is not None:
            options, hypothesis = job.prepare()
        outcome.options = options
        outcome.hypothesis = tuple(hypothesis) if hypothesis else None
        measure: contextlib.AbstractContextManager[Measurement | None] = (
            job.clock.measure() if job.clock is not None else contextlib.nullcontext()
        )
        with measure as m:
            t0 = time.perf_counter()
            encoded = encode_window(self.engine, job.audio, job.context_s)
            result = self.engine.decode(encoded, options, hypothesis=hypothesis)
            if job.word_timestamps:
                result = with_words(self.engine, encoded, options, result)
            if isinstance(job.tag, Coalesced):  # a backlog of finals in one window
                outcome.parts = complete_parts(self.engine, job, result)
            wall = time.perf_counter() - t0
        outcome.result = result
        self.costs.observe_encode(encoded.enc.shape[1], 1, encoded.encoder_s)
        self.costs.observe_job(job.kind, encoded.encoder_s, result.stats.decoder_s)
        self.costs.observe_batch(1)
        if result.stats.forward_passes:
            self.costs.observe_step(1, result.stats.decoder_s / result.stats.forward_passes)
        outcome.encoder_s = encoded.encoder_s
        outcome.decoder_s = result.stats.decoder_s
        outcome.compute_s = m.seconds if m is not None else wall
        outcome.context_s = encoded.enc.shape[1] / ENCODER_POSITIONS_PER_S
        return outcome

    # ------------------------------------------------------------------ stats

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
            waiting = self._queue.waiting(stream)
            return replace(self._books.of_stream(stream), queue_depth=waiting)

    # ------------------------------------------------------------------ capacity

    def warm_up(self, language: str | None = None) -> float:
        """Run a final-shaped decode three times (the first calls pick kernels and allocate)
        and set the prior of admission control from the fastest encoder call; returns the
        prior's cost of one final (seconds).

        A final is its full 30 s encoder call plus a decode drafted from its partials: 0.74 s
        and 0.1-0.2 s on this 2-core CPU, so 1.25 x the encoder. (Decoding silence says
        nothing about speech, and a warm-up that shares the CPU with something else would
        overstate it: the fastest of the calls is taken.) Measurement replaces the prior once
        streams run (`core.capacity`).
        """
        clip = np.zeros(SAMPLE_RATE, dtype=np.float32)
        opts = DecodingOptions(language=language if self.engine.multilingual else None)
        encoder_s = []
        for _ in range(3):
            encoded = encode_window(self.engine, clip, None)
            self.engine.decode(encoded, opts)
            encoder_s.append(encoded.encoder_s)
        cost = 1.25 * min(encoder_s[1:])
        with self._cond:
            self._books.meter.set_prior(cost)
        return cost

    def streams_changed(self, streams: int) -> None:
        """The number of live streams on this worker is now ``streams`` (the server says)."""
        with self._cond:
            self._books.meter.streams_changed(time.monotonic(), streams)

    def load(self) -> Load:
        """The measured load over the meter's window."""
        with self._cond:
            return self._books.load()

    def admission(self, streams: int, joins_room: bool = False) -> Admission:
        """May one more publisher join ``streams`` live ones (`core.capacity.admit`)?"""
        with self._cond:
            return self._books.admission(streams, joins_room)

    def text_to_ids(self, text: str) -> tuple[int, ...]:
        """Prompt token ids (cached per text: prompts repeat from decode to decode)."""
        return tuple(self.engine.text_to_ids(text)) if text else ()
