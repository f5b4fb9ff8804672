"""A live caption stream: audio in, caption events out, through the shared inference worker.

`LiveStream` glues the pieces for one stream: the segmenter (run in the caller's thread by
`feed`, cheap), the caption policy (pure), the `InferenceWorker` (shared by every stream of the
process) and the stream's `CaptionLog`. The same code serves the microphone (`streamcap
dictate`), files (`streamcap transcribe --live`) and the caption server.

`replay` feeds a whole file through a stream on a real clock (paced, worker thread) or on the
computation-aware `SimulatedClock` (the worker is stepped in the replaying thread so that each
job starts exactly when one processor would have been free, and audio that arrived meanwhile is
fed first).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

import numpy as np

from streamcap.core.captions import Caption, CaptionLog
from streamcap.core.constants import SAMPLE_RATE
from streamcap.core.policy import (
    PARTIAL_CONTEXT_MARGIN_S,
    PARTIAL_CONTEXT_MIN_S,
    CaptionPolicy,
    DecodeRequest,
    PolicyConfig,
    Step,
)
from streamcap.core.segmenter import Segmenter, SegmenterConfig
from streamcap.decoding.options import DecodingOptions
from streamcap.runtime.clock import Clock, RealClock, SimulatedClock
from streamcap.runtime.worker import DecodeJob, InferenceWorker, JobOutcome

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LiveConfig:
    """Everything a live stream is tuned by.

    - language: spoken language code, or None to detect it (per decode until the first
      non-empty final, then fixed for the stream when ``lock_language``).
    - task: "transcribe" or "translate" (to English).
    - partial_context_margin_s: partials run the encoder on the window's audio plus this margin
      (seconds) instead of the standard 30 s; None: partials use the standard input too.
    - partial_context_min_s: the shortest encoder context a partial gets.
    """

    language: str | None = None
    task: str = "transcribe"
    segmenter: SegmenterConfig = field(default_factory=SegmenterConfig)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    lock_language: bool = True
    partial_context_margin_s: float | None = PARTIAL_CONTEXT_MARGIN_S
    partial_context_min_s: float = PARTIAL_CONTEXT_MIN_S

    def __post_init__(self) -> None:
        if self.task not in ("transcribe", "translate"):
            raise ValueError(f"task must be 'transcribe' or 'translate', got {self.task!r}")
        if self.segmenter.max_utterance_s > self.policy.max_window_s:
            raise ValueError("segmenter.max_utterance_s must fit in policy.max_window_s")
        if self.partial_context_margin_s is not None and self.partial_context_margin_s < 0:
            raise ValueError("partial_context_margin_s must be >= 0")


class LiveStream:
    """One stream's live captioning.

    - ``feed(samples)``: mono float32 16 kHz audio, any chunk size; thread-safe and cheap (the
      segmenter runs in the caller's thread, decodes go to the worker).
    - ``finish()``: end of stream; flushes the segmenter so the open utterance is finalised.
      It returns at once; its final caption follows from the worker, and ``wait_idle(timeout)``
      blocks until every decode of this stream is done and its captions delivered. After
      ``finish`` the stream accepts no more audio.
    - ``on_caption(caption)``: called for every event in ``seq`` order, from the worker thread
      (or the thread that steps a worker without a thread, see ``replay``), with the stream's
      lock held: keep it short and do not call back into the stream from another thread
      and wait for it.
    - ``log``: the stream's `CaptionLog` (replay store for reconnecting viewers).

    Stream time starts with the first sample fed: the clock time of the first ``feed`` minus
    that chunk's duration.
    """

    def __init__(
        self,
        stream_id: str,
        worker: InferenceWorker,
        on_caption: Callable[[Caption], None] | None = None,
        config: LiveConfig | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.stream_id = stream_id
        self.worker = worker
        self.config = config or LiveConfig()
        self.clock: Clock = clock or RealClock()
        self.on_caption = on_caption
        self.log = CaptionLog(stream_id)
        self._segmenter = Segmenter(self.config.segmenter)
        self._policy = CaptionPolicy(self.config.policy, self.log)
        self._lock = threading.RLock()
        self._idle = threading.Condition(self._lock)
        self._outstanding = 0
        self._t0: float | None = None
        self._finished = False
        self._language = self.config.language
        self.fed_s = 0.0
        self.errors: list[BaseException] = []
        #: Called with every finished decode job of this stream (metrics, evaluation).
        self.decode_observer: Callable[[DecodeJob, JobOutcome], None] | None = None

    # ------------------------------------------------------------------ public

    def feed(self, samples: np.ndarray) -> None:
        """Push audio (mono float32 in [-1, 1] at 16 kHz)."""
        x = np.asarray(samples, dtype=np.float32).reshape(-1)
        with self._lock:
            if self._finished:
                raise RuntimeError(f"stream {self.stream_id!r} is finished")
            if self._t0 is None:
                self._t0 = self.clock.now() - len(x) / SAMPLE_RATE
            self.fed_s += len(x) / SAMPLE_RATE
            events = self._segmenter.push(x)
            now = self.now()
            step = Step()
            for ev in events:
                step.extend(self._policy.on_event(ev, now))
            step.extend(self._policy.on_tick(self._segmenter.time, now))
            self._apply(step)

    def finish(self) -> None:
        """End of stream: finalise the open utterance (non-blocking; see ``wait_idle``)."""
        with self._lock:
            if self._finished:
                return
            self._finished = True
            events = self._segmenter.flush()
            now = self.now()
            step = Step()
            for ev in events:
                step.extend(self._policy.on_event(ev, now))
            step.extend(self._policy.finish(now))
            self._apply(step)

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Block until no decode of this stream is outstanding; False on timeout.

        With a worker that has no thread, runs the worker's jobs in the calling thread.
        """
        if not self.worker.threaded:
            self.worker.run_pending()
        with self._idle:
            return self._idle.wait_for(lambda: self._outstanding == 0, timeout)

    @property
    def finished(self) -> bool:
        return self._finished

    @property
    def language(self) -> str | None:
        """The configured language, or the one detected and locked, or None."""
        return self._language

    def now(self) -> float:
        """Stream time on the clock: seconds since the first sample fed."""
        return self.clock.now() - self._t0 if self._t0 is not None else 0.0

    def stats(self) -> dict[str, float]:
        """This stream's decode counters from the worker."""
        return self.worker.stream_stats(self.stream_id)

    @property
    def committed_text(self) -> str:
        """All final text so far."""
        with self._lock:
            return self._policy.committed_text

    # ------------------------------------------------------------------ internals

    def _apply(self, step: Step) -> None:
        """Deliver captions (in seq order), then submit requests (caller holds the lock)."""
        for cap in step.captions:
            if self.on_caption is not None:
                try:
                    self.on_caption(cap)
                except Exception:  # a viewer's bug must not lose the stream's state
                    log.exception("on_caption of stream %r failed", self.stream_id)
        for req in step.requests:
            self._outstanding += 1
            self.worker.submit(self._job(req))

    def _job(self, req: DecodeRequest) -> DecodeJob:
        context = None
        margin = self.config.partial_context_margin_s
        if req.kind == "partial" and margin is not None:
            context = max(self.config.partial_context_min_s, req.end - req.start + margin)
        return DecodeJob(
            stream=self.stream_id,
            kind=req.kind,
            window=req.window,
            audio=req.audio,
            on_done=self._on_done,
            prepare=lambda: self._prepare(req),
            context_s=context,
            clock=self.clock,
            tag=req,
        )

    def _options(self) -> DecodingOptions:
        language = self._language
        if not self.worker.engine.multilingual:
            language = None
        return DecodingOptions(language=language, task=self.config.task)

    def _prepare(self, req: DecodeRequest) -> tuple[DecodingOptions, tuple[int, ...] | None]:
        with self._lock:
            inputs = self._policy.prepare(req)
            options = self._options()
        if inputs.prompt:
            options = replace(options, prompt_ids=self.worker.text_to_ids(inputs.prompt))
        return options, inputs.hypothesis

    def _on_done(self, job: DecodeJob, outcome: JobOutcome) -> None:
        req: DecodeRequest = job.tag
        with self._lock:
            self._outstanding -= 1
            if outcome.error is not None:
                self.errors.append(outcome.error)
            if self.decode_observer is not None and not outcome.dropped:
                self.decode_observer(job, outcome)
            result = outcome.result
            if (
                result is not None
                and req.kind == "final"
                and self._language is None
                and self.config.lock_language
                and result.language
                and result.text.strip()
            ):
                self._language = result.language
            self._apply(self._policy.on_result(req, result, self.now()))
            self._idle.notify_all()


def replay(
    stream: LiveStream,
    audio: np.ndarray | Iterable[np.ndarray],
    chunk_s: float = 0.1,
    speed: float = 1.0,
    finish: bool = True,
) -> None:
    """Feed ``audio`` (16 kHz mono) through ``stream`` as if it arrived live.

    On a `SimulatedClock` the worker must not run its own thread: this function steps it, so
    each job starts when the (single) processor is free and takes the time it really takes,
    while audio that arrived meanwhile is fed before the next job is chosen. On a real clock
    the worker's thread runs (started here if needed) and feeding sleeps to keep pace.
    """
    clock = stream.clock
    worker = stream.worker
    simulated = isinstance(clock, SimulatedClock)
    if simulated and worker.threaded:
        raise RuntimeError("replay on a SimulatedClock steps the worker: do not start its thread")
    if not simulated and not worker.threaded:
        worker.start()
    if isinstance(audio, np.ndarray):
        size = max(1, round(chunk_s * SAMPLE_RATE))
        flat = audio.reshape(-1)
        chunks: Iterable[np.ndarray] = (flat[i : i + size] for i in range(0, flat.size, size))
    else:
        chunks = audio
    t0 = clock.now()
    fed = 0
    for chunk in chunks:
        fed += len(chunk)
        arrival = t0 + fed / SAMPLE_RATE / speed
        if simulated:
            while clock.now() < arrival and worker.run_one():
                pass
        clock.wait_until(arrival)
        stream.feed(chunk)
    if finish:
        stream.finish()
        stream.wait_idle()
