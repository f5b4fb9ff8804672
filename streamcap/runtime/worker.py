"""The inference worker: one thread owns the engine and serves decode jobs from many streams.

Scheduler rules (DESIGN.md):
- finals before partials; finals in the order they were submitted, never dropped;
- at most one partial waits per stream: a newer partial of a stream replaces (drops) the older,
  and a final of a stream drops its waiting partials of the same or an older window; when the
  worker falls behind it therefore decodes fewer partials, never fewer finals, and the queue is
  bounded by the number of streams plus the finals;
- among streams, the partial waiting longest goes first.

Partials may use a shortened encoder context (`DecodeJob.context_s`, `Engine.encode`'s
whisper.cpp-style "audio context": the audio plus a margin); the encoder's cost falls in
proportion. Finals (``context_s=None``) always use the model's standard 30 s input, so they are
exact.

The worker runs either on its own thread (`start()`), or is stepped by its caller
(`run_one()`, `run_pending()`): the simulated clock replays a file that way, so that jobs start
exactly when a single processor would have been free.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from streamcap.decoding.options import DecodeResult, DecodeStats, DecodingOptions
from streamcap.runtime.clock import Clock
from streamcap.runtime.engine import SAMPLE_RATE, WINDOW_S, Encoded, Engine

log = logging.getLogger(__name__)
JobKind = Literal["partial", "final"]
POSITIONS_PER_S = 50  # encoder output frames per second of audio (1500 for 30 s)
MAX_STREAM_STATS = 1024  # per-stream stats kept (least recently active dropped first)


@dataclass
class JobOutcome:
    """What became of a job: a result, a drop (stale partial), or an error."""

    result: DecodeResult | None = None
    dropped: bool = False
    error: BaseException | None = None
    encoder_s: float = 0.0
    decoder_s: float = 0.0
    compute_s: float = 0.0  # wall time of encode + decode, as charged to the clock
    queued_s: float = 0.0
    context_s: float = WINDOW_S
    options: DecodingOptions | None = None  # as decoded (after prepare)
    hypothesis: tuple[int, ...] | None = None


@dataclass(eq=False)
class DecodeJob:
    """One decode of one window of one stream.

    ``prepare`` (called on the worker thread when the job starts) returns the options and the
    hypothesis to draft from, so they reflect results delivered just before. ``on_done`` is
    called on the worker thread (or the stepping thread) with the outcome, also for drops.
    """

    stream: str
    kind: JobKind
    window: int
    audio: np.ndarray
    on_done: Callable[[DecodeJob, JobOutcome], None]
    options: DecodingOptions = field(default_factory=DecodingOptions)
    hypothesis: Sequence[int] | None = None
    prepare: Callable[[], tuple[DecodingOptions, Sequence[int] | None]] | None = None
    context_s: float | None = None  # encoder context for a partial; None: standard 30 s
    clock: Clock | None = None
    tag: Any = None  # the submitter's own reference (e.g. its request)
    id: int = 0
    submitted: float = 0.0


@dataclass
class _Stats:
    jobs: int = 0
    finals: int = 0
    partials: int = 0
    dropped_partials: int = 0
    errors: int = 0
    compute_s: float = 0.0
    queue_wait_s: float = 0.0
    audio_s: float = 0.0
    decode: DecodeStats = field(default_factory=DecodeStats)

    def as_dict(self) -> dict[str, float]:
        d: dict[str, float] = {
            "jobs": self.jobs,
            "finals": self.finals,
            "partials": self.partials,
            "dropped_partials": self.dropped_partials,
            "errors": self.errors,
            "compute_s": round(self.compute_s, 4),
            "queue_wait_s": round(self.queue_wait_s, 4),
            "audio_decoded_s": round(self.audio_s, 3),
        }
        d.update(self.decode.as_dict())
        return d


def encode_window(engine: Engine, audio: np.ndarray, context_s: float | None = None) -> Encoded:
    """Log-mel + encoder; ``context_s`` < 30 s shortens the encoder context (partials only)."""
    return engine.encode(audio, context_s=context_s)


class InferenceWorker:
    """Owns ``engine``; decodes jobs from any number of streams (see the module docstring)."""

    def __init__(self, engine: Engine, *, name: str = "streamcap-worker") -> None:
        self.engine = engine
        self.name = name
        self._cond = threading.Condition()
        self._finals: deque[DecodeJob] = deque()
        self._partials: dict[str, DecodeJob] = {}
        self._running: DecodeJob | None = None
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._ids = itertools.count(1)
        self._total = _Stats()
        # per-stream totals, least recently active first; bounded so a server that sees
        # stream after stream for months keeps a fixed amount of bookkeeping
        self._streams: OrderedDict[str, _Stats] = OrderedDict()
        self._streams_seen = 0
        self._max_depth = 0
        self._prompt_cache: dict[str, tuple[int, ...]] = {}

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

        Waiting partials are dropped (their ``on_done`` hears of it).
        """
        with self._cond:
            thread = self._thread
            self._stopping = True
            dropped = list(self._partials.values())
            self._partials.clear()
            if not drain:
                dropped += list(self._finals)
                self._finals.clear()
            self._cond.notify_all()
        self._notify_dropped(dropped)
        if thread is not None:
            thread.join(timeout)
        with self._cond:
            if self._thread is thread and (thread is None or not thread.is_alive()):
                self._thread = None

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
        """Queue ``job``; may drop waiting partials it makes stale (their ``on_done`` is told)."""
        if job.kind not in ("partial", "final"):
            raise ValueError(f"job kind must be 'partial' or 'final', got {job.kind!r}")
        dropped: list[DecodeJob] = []
        with self._cond:
            job.id = next(self._ids)
            job.submitted = time.perf_counter()
            old = self._partials.get(job.stream)
            if job.kind == "final":
                self._finals.append(job)
                if old is not None and old.window <= job.window:
                    dropped.append(self._partials.pop(job.stream))
            else:
                if old is not None:
                    dropped.append(old)
                self._partials[job.stream] = job
            self._max_depth = max(self._max_depth, self._depth())
            self._cond.notify_all()
        self._notify_dropped(dropped)
        return job

    def _depth(self) -> int:
        return len(self._finals) + len(self._partials)

    @property
    def queue_depth(self) -> int:
        """Jobs waiting (not counting the one running)."""
        with self._cond:
            return self._depth()

    def idle(self, stream: str | None = None) -> bool:
        """Nothing waiting or running (for ``stream`` only, if given)."""
        with self._cond:
            return self._idle(stream)

    def _idle(self, stream: str | None) -> bool:
        jobs = [*self._finals, *self._partials.values()]
        if self._running is not None:
            jobs.append(self._running)
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

    def _take(self) -> DecodeJob | None:
        if self._finals:
            return self._finals.popleft()
        if self._partials:
            job = min(self._partials.values(), key=lambda j: j.id)
            del self._partials[job.stream]
            return job
        return None

    # ------------------------------------------------------------------ running

    def run_one(self) -> bool:
        """Run the next job in the calling thread; False when there was none."""
        if self.threaded:
            raise RuntimeError("the worker thread is running: do not step it")
        with self._cond:
            job = self._take()
            if job is None:
                return False
            self._running = job
        self._run(job)
        return True

    def run_pending(self) -> int:
        """Run jobs in the calling thread until the queue is empty; returns how many ran."""
        n = 0
        while self.run_one():
            n += 1
        return n

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._stopping and not (self._finals or self._partials):
                    self._cond.wait()
                job = self._take()
                if job is None:  # stopping and drained
                    return
                self._running = job
            self._run(job)

    def _run(self, job: DecodeJob) -> None:
        outcome = JobOutcome(queued_s=time.perf_counter() - job.submitted)
        try:
            outcome = self._execute(job, outcome)
        except Exception as e:  # a bad job must not kill the worker
            outcome.error = e
        with self._cond:
            self._account(job, outcome)
        try:
            job.on_done(job, outcome)
        except Exception:  # the submitter's bug must not stop every other stream
            log.exception("on_done of a %s job of stream %r failed", job.kind, job.stream)
        finally:
            with self._cond:
                self._running = None
                self._cond.notify_all()

    def _execute(self, job: DecodeJob, outcome: JobOutcome) -> JobOutcome:
        options, hypothesis = job.options, job.hypothesis
        if job.prepare is not None:
            options, hypothesis = job.prepare()
        outcome.options = options
        outcome.hypothesis = tuple(hypothesis) if hypothesis else None
        measure = job.clock.measure() if job.clock is not None else contextlib.nullcontext()
        with measure as m:
            t0 = time.perf_counter()
            encoded = encode_window(self.engine, job.audio, job.context_s)
            result = self.engine.decode(encoded, options, hypothesis=hypothesis)
            wall = time.perf_counter() - t0
        outcome.result = result
        outcome.encoder_s = encoded.encoder_s
        outcome.decoder_s = result.stats.decoder_s
        outcome.compute_s = m.seconds if m is not None else wall
        outcome.context_s = encoded.enc.shape[1] / POSITIONS_PER_S
        return outcome

    def _stream(self, stream: str) -> _Stats:
        stats = self._streams.get(stream)
        if stats is None:
            stats = self._streams[stream] = _Stats()
            self._streams_seen += 1
            while len(self._streams) > MAX_STREAM_STATS:
                self._streams.popitem(last=False)
        else:
            self._streams.move_to_end(stream)
        return stats

    def _account(self, job: DecodeJob, outcome: JobOutcome) -> None:
        for s in (self._total, self._stream(job.stream)):
            s.queue_wait_s += outcome.queued_s
            if outcome.error is not None:
                s.errors += 1
                continue
            s.jobs += 1
            s.compute_s += outcome.compute_s
            s.audio_s += len(job.audio) / SAMPLE_RATE
            if job.kind == "final":
                s.finals += 1
            else:
                s.partials += 1
            if outcome.result is not None:
                s.decode.add(outcome.result.stats)

    def _notify_dropped(self, jobs: list[DecodeJob]) -> None:
        if not jobs:
            return
        with self._cond:
            for job in jobs:
                for s in (self._total, self._stream(job.stream)):
                    s.dropped_partials += job.kind == "partial"
        for job in jobs:
            try:
                job.on_done(job, JobOutcome(dropped=True))
            except Exception:
                log.exception("on_done of a dropped job of stream %r failed", job.stream)

    # ------------------------------------------------------------------ stats

    def total_stats(self) -> dict[str, float]:
        """Totals over all streams, plus the queue depth now and at most."""
        with self._cond:
            d = self._total.as_dict()
            d["queue_depth"] = self._depth()
            d["max_queue_depth"] = self._max_depth
            d["streams"] = self._streams_seen
        return d

    def stream_stats(self, stream: str) -> dict[str, float]:
        """Totals for one stream, plus its jobs waiting now."""
        with self._cond:
            d = self._streams.get(stream, _Stats()).as_dict()
            d["queue_depth"] = sum(j.stream == stream for j in self._finals) + (
                stream in self._partials
            )
        return d

    def text_to_ids(self, text: str) -> tuple[int, ...]:
        """Prompt token ids (cached per text: prompts repeat from decode to decode)."""
        if not text:
            return ()
        ids = self._prompt_cache.get(text)
        if ids is None:
            if len(self._prompt_cache) > 256:
                self._prompt_cache.clear()
            ids = self._prompt_cache[text] = self.engine.text_to_ids(text)
        return ids
