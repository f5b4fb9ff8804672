"""The inference worker: one thread owns the engine and serves decode jobs from many streams.

The engine is any `runtime.engine_api.InferenceEngine` (made by name, `runtime.engines`);
batching needs what only the transformers engine has (`runtime.batching.can_batch`), so
another engine decodes one job at a time.

A `runtime.worker_api.Worker` on the shared scheduler core (`runtime.scheduler`: the queue's
rules, docs/design.md and `runtime.job_queue`, shared with the remote backend's gateway; the books,
admission, the lifecycle): finals before partials, in order, never dropped; at most one partial
waits per stream (a newer one drops the older, a final drops its stream's older ones); among
streams the partial waiting longest goes first. This class runs the jobs.

Partials may use a shortened encoder context (`DecodeJob.context_s`, the engine's
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

Thread contract: `runtime.worker_api` (one condition lock, held only for bookkeeping, never
while a callback or a decode runs; `submit` never runs a callback). Callbacks (``prepare``,
``on_done`` of run and of dropped jobs) run on the worker's thread while it runs; on a worker
without a thread they run in the thread that steps it (`run_one`, `run_pending`, `wait_idle`,
and `stop`, which then tells the dropped jobs itself). Stepping a worker whose thread runs is
an error.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence

import numpy as np

from streamcap.core.capacity import CapacityConfig
from streamcap.core.constants import ENCODER_POSITIONS_PER_S, SAMPLE_RATE
from streamcap.core.decode_types import DecodeResult, DecodingOptions
from streamcap.runtime.batching import BatchRunner, can_batch
from streamcap.runtime.clock import Measurement
from streamcap.runtime.coalesce import coalesce_finals, complete_parts, tell_part
from streamcap.runtime.costs import CostModel, CostModelConfig
from streamcap.runtime.engine import adapt_threads, with_words
from streamcap.runtime.engine_api import EncodedAudio, InferenceEngine
from streamcap.runtime.jobs import (
    DecodeJob,
    JobKind,
    JobOutcome,
)
from streamcap.runtime.memory import HeapTrimmer
from streamcap.runtime.scheduler import Scheduler

__all__ = ["InferenceWorker"]


def encode_window(
    engine: InferenceEngine, audio: np.ndarray, context_s: float | None = None
) -> EncodedAudio:
    """Log-mel + encoder; ``context_s`` < 30 s shortens the encoder context (partials only)."""
    return engine.encode(audio, context_s=context_s)


def final_cost(engine: InferenceEngine, language: str | None = None) -> float:
    """A final's cost on ``engine`` (seconds), for the prior of admission control: a
    final-shaped decode run three times (the first calls pick kernels and allocate), the
    fastest encoder call taken.

    A final is its full 30 s encoder call plus a decode drafted from its partials: 0.74 s and
    0.1-0.2 s on this 2-core CPU, so 1.25 x the encoder. (Decoding silence says nothing about
    speech, and a warm-up that shares the CPU with something else would overstate it: the
    fastest of the calls is taken.) Measurement replaces the prior once streams run
    (`core.capacity`).
    """
    clip = np.zeros(SAMPLE_RATE, dtype=np.float32)
    opts = DecodingOptions(language=language if engine.multilingual else None)
    encoder_s = []
    for _ in range(3):
        encoded = encode_window(engine, clip, None)
        engine.decode(encoded, opts)
        encoder_s.append(encoded.encoder_s)
    return 1.25 * min(encoder_s[1:])


class InferenceWorker(Scheduler):
    """Owns ``engine``; decodes jobs from any number of streams (see the module docstring).

    The queue, the books, admission and the lifecycle are the shared core's
    (`runtime.scheduler`); this class runs the jobs."""

    def __init__(
        self,
        engine: InferenceEngine,
        *,
        name: str = "streamcap-worker",
        capacity: CapacityConfig | None = None,
        max_batch: int = 8,
    ) -> None:
        # the queue completes joined finals (`_execute`); the costs are measured per batch size
        costs = CostModel(CostModelConfig(max_batch=max(1, max_batch)))
        super().__init__(
            name=name,
            capacity=capacity,
            costs=costs,
            coalesce=self._coalesce,
        )
        self.engine: InferenceEngine = engine
        self._heap = HeapTrimmer()
        self._batcher: BatchRunner | None = None  # made at the first batch
        self._batchable: bool | None = None

    def _coalesce(self, prev: DecodeJob, new: DecodeJob) -> DecodeJob | None:
        """The queue's way to join a stream's waiting finals (`runtime.coalesce`), cutting the
        joined result with this engine's tokenizer."""
        return coalesce_finals(prev, new, decode=self.engine.ids_to_text)

    def warm_up(self, language: str | None = None) -> float:
        """Warm the engine up and set the prior of admission control (`final_cost`);
        returns the prior's cost of one final (seconds). A live worker's thread counts
        follow the machine's load from here on (`Engine.adapt_threads`).
        """
        adapt_threads(self.engine)
        cost = final_cost(self.engine, language)
        self._set_prior(cost)
        return cost

    def wait_idle(self, timeout: float | None = None, stream: str | None = None) -> bool:
        """Block until idle (runs the jobs itself when no thread is started)."""
        if not self.threaded:
            self.run_pending()
            return self.idle(stream)
        return super().wait_idle(timeout, stream)

    def _batch_size(self, waiting: int, kind: JobKind) -> int:
        """How many of ``waiting`` jobs of one kind the cost model says pay to decode
        together."""
        if self._batchable is None:
            self._batchable = can_batch(self.engine)
        if waiting < 2 or self.costs.config.max_batch < 2 or not self._batchable:
            return 1
        return self.costs.decoder_batch(waiting, kind)

    # ------------------------------------------------------------------ running

    def run_one(self) -> bool:
        """Tell dropped jobs, then run the next job in the calling thread; False when there
        was none."""
        if self.threaded:
            raise RuntimeError("the worker thread is running: do not step it")
        self._deliver_dropped()
        with self._cond:
            jobs = self._running = self._queue.take()
            if not jobs:
                return False
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
        while jobs := self._next(self._batch_size):
            if len(jobs) == 1:
                self._run(jobs[0])
            else:
                self._run_batch(jobs)
            self._heap.worked()

    def _between_bursts(self) -> None:
        self._heap.idle()  # give the heap's free pages back (issue 25)

    def _run(self, job: DecodeJob) -> None:
        outcome = JobOutcome(queued_s=time.perf_counter() - job.submitted)
        try:
            outcome = self._execute(job, outcome)
        except Exception as e:  # a bad job must not kill the worker
            outcome.error = e
        self._finish([job], [outcome])

    def _run_batch(self, jobs: list[DecodeJob]) -> None:
        """Run several jobs as one batch (`runtime.batching`); each is told on its own."""
        now = time.perf_counter()
        outcomes = [JobOutcome(queued_s=now - j.submitted) for j in jobs]
        ready: list[int] = []
        prepared: list[tuple[DecodingOptions, tuple[int, ...] | None]] = []
        for i, job in enumerate(jobs):
            try:
                prepared.append(job.prepared(self.engine))
                ready.append(i)
            except Exception as e:  # a bad job must not fail the others
                outcomes[i].error = e
        try:
            self._batch_runner().run(
                [jobs[i] for i in ready], prepared, [outcomes[i] for i in ready]
            )
        except Exception as e:  # the batch failed: every job in it hears of it
            for i in ready:
                outcomes[i].error = e
        self._finish(jobs, outcomes)

    def _batch_runner(self) -> BatchRunner:
        if self._batcher is None:
            engine = self.engine
            if not can_batch(engine):  # (`_batch_size` asks for no batch then)
                raise RuntimeError("this engine decodes one job at a time")
            self._batcher = BatchRunner(engine, self.costs)
        return self._batcher

    def _execute(self, job: DecodeJob, outcome: JobOutcome) -> JobOutcome:
        options, hypothesis = outcome.options, outcome.hypothesis = job.prepared(self.engine)
        t0 = time.perf_counter()
        with _measured(job) as m:
            encoded = encode_window(self.engine, job.audio, job.context_s)
            result = self.engine.decode(encoded, options, hypothesis=hypothesis)
            if job.word_timestamps:
                result = with_words(self.engine, encoded, options, result)
        outcome.result = result
        outcome.encoder_s = encoded.encoder_s
        outcome.decoder_s = result.stats.decoder_s
        outcome.compute_s = m.seconds if m is not None else time.perf_counter() - t0
        outcome.context_s = encoded.positions / ENCODER_POSITIONS_PER_S
        if job.parts is not None:  # a backlog of finals in one window
            # the finals the joined decode completed are told before a later one is decoded
            # again alone (charged to a simulated clock first: told when they would be)
            def tell_first(results: Sequence[DecodeResult]) -> None:
                for i, r in enumerate(results):
                    tell_part(job, outcome, i, r)
                outcome.told = len(results)

            t1 = time.perf_counter()
            with _measured(job) as again:
                outcome.parts = complete_parts(self.engine, job, result, tell_first=tell_first)
            outcome.compute_s += again.seconds if again is not None else time.perf_counter() - t1
        self.costs.observe_encode(encoded.positions, 1, encoded.encoder_s)
        self.costs.observe_job(job.kind, encoded.encoder_s, result.stats.decoder_s)
        self.costs.observe_batch(1)
        if result.stats.forward_passes:
            self.costs.observe_step(1, result.stats.decoder_s / result.stats.forward_passes)
        return outcome

    # ------------------------------------------------------------------ capacity


def _measured(job: DecodeJob) -> contextlib.AbstractContextManager[Measurement | None]:
    """Time a block of the job's compute, charged to its clock when it has one (simulated)."""
    return job.clock.measure() if job.clock is not None else contextlib.nullcontext()
