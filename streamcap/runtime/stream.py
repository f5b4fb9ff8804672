"""A live caption stream: audio in, caption events out, through the shared inference worker.

`LiveStream` glues the pieces for one stream: the segmenter (cheap), the caption policy (pure)
and the worker (`runtime.worker_api.Worker`, shared by every stream of the process: an
`InferenceWorker`, or the Ray backend's gateway). It emits `CaptionEvent`s
without numbers: the sink (the server's stream log, a CLI's `CaptionLog`) owns the one sequence.
The same code serves the microphone (`streamcap dictate`), files (`streamcap transcribe
--live`) and the caption server.

Threads. Two threads call into a stream: the one that feeds it (the server's asyncio event loop,
a microphone reader, a replaying loop) and the worker thread (decode results, `prepare`). The
feeding thread must never wait for the worker — an event loop that blocks on a decode stalls
every stream and viewer. So `feed` and `finish` only put their input in the stream's inbox and
process the inbox if the stream's lock is free at that moment; if the worker holds it, the
worker processes the inbox before it lets go (whoever holds the lock drains the inbox: nothing
is lost or reordered). The worker thread may wait for the lock: the feeding thread holds it only
for segmenter and policy code, never for a decode. `on_caption` runs on whichever thread
processed the event, with the lock held: it must be quick, thread-safe and must not call back
into the stream from another thread and wait for it (the server's posts the event to its loop
with `call_soon_threadsafe`).

A `CaptionStage` may be slow (the speaker labeller embeds a final's audio), so it runs only on
the thread that delivers decode results (the worker's), never on the feeding thread: captions
the feeding thread makes (a final whose early decode was already back when the pause is
confirmed, or at the end of the stream) wait, in order, for the stage's own thread
(`caption_stage.stage_executor`), and every caption after them waits behind them.

`replay` (`runtime.replay`) feeds a whole file through a stream at the pace of a clock, with the
one pacer (`clock.paced_chunks`): on a real clock it sleeps and the worker's thread runs; on the
computation-aware `SimulatedClock` the worker is stepped in the replaying thread so that each job
starts exactly when one processor would have been free, and audio that arrived meanwhile is fed
first. What a stream is tuned by is `runtime.live_config` (`LiveConfig`).
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np

from streamcap.core.captions import CaptionEvent
from streamcap.core.constants import SAMPLE_RATE
from streamcap.core.decode_types import DecodeResult, DecodingOptions
from streamcap.core.policy import CaptionPolicy, DecodeRequest, Step
from streamcap.core.prompting import join_prompt_ids
from streamcap.core.segmenter import Segmenter
from streamcap.core.text import describe_drop
from streamcap.decoding.spec import MAX_PROMPT_TOKENS
from streamcap.runtime.caption_stage import CaptionStage
from streamcap.runtime.caption_stage import stage_executor as _stage_executor
from streamcap.runtime.clock import Clock, RealClock
from streamcap.runtime.coalesce import coalesce_finals
from streamcap.runtime.jobs import DecodeJob, JobOutcome, StreamStats
from streamcap.runtime.live_config import AUTO_EACH as AUTO_EACH
from streamcap.runtime.live_config import LANGUAGE_MIN_PROB, LANGUAGE_MIN_SPEECH_S, LiveConfig
from streamcap.runtime.live_config import split_language as split_language
from streamcap.runtime.replay import replay as replay
from streamcap.runtime.worker_api import Worker

log = logging.getLogger(__name__)

#: Finals dropped with no text by every `LiveStream` of the process, by reason (the server's
#: /metrics reads it at scrape time: `finals_dropped`).
_DROPS_TOTAL: dict[str, int] = {}
_DROPS_LOCK = threading.Lock()


def finals_dropped() -> dict[str, int]:
    """Voiced finals dropped with no text by all live streams of this process, by reason."""
    with _DROPS_LOCK:
        return dict(_DROPS_TOTAL)


#: An inbox item: audio to feed, or None for the end of the stream.
_Input = np.ndarray | None


class LiveStream:
    """One stream's live captioning (see the module docstring for the thread contract).

    - ``feed(samples)``: mono float32 16 kHz audio, any chunk size; never blocks.
    - ``finish()``: end of stream; the segmenter is flushed so the open utterance is finalised.
      It returns at once; its final follows from the worker, and ``wait_idle(timeout)``
      blocks until every input is processed and every decode of this stream is done and its
      captions delivered. After ``finish`` the stream accepts no more audio.
    - ``on_caption(event)``: every caption event in order, unnumbered (`CaptionEvent`).

    Stream time starts with the first sample fed: the clock time of the first ``feed`` minus
    that chunk's duration.
    """

    def __init__(
        self,
        stream_id: str,
        worker: Worker,
        on_caption: Callable[[CaptionEvent], None] | None = None,
        config: LiveConfig | None = None,
        clock: Clock | None = None,
        stage: CaptionStage | None = None,
    ) -> None:
        self.stream_id = stream_id
        self.stage = stage
        self.worker = worker
        self.config = config or LiveConfig()
        self.clock: Clock = clock or RealClock()
        self.on_caption = on_caption
        vad = None
        if self.config.segmenter.vad != "webrtc":  # torch's Silero model, in audio/
            from streamcap.audio.silero import make_vad

            vad = make_vad(self.config.segmenter)
        self._segmenter = Segmenter(self.config.segmenter, vad)
        self._policy = CaptionPolicy(self.config.policy)
        self._lock = threading.RLock()
        self._idle = threading.Condition(self._lock)
        self._inbox: deque[_Input] = deque()
        self._held: list[CaptionEvent] = []  # captions waiting for the stage's thread
        self._stage_thread: int | None = None  # the thread that may run the stage now
        self._outstanding = 0
        self._t0: float | None = None
        self._input_closed = False
        self._finished = False
        self._language = self.config.language
        self.fed_s = 0.0
        self.errors: list[BaseException] = []
        #: Called with every finished decode job of this stream (metrics, evaluation).
        self.decode_observer: Callable[[DecodeJob, JobOutcome], None] | None = None

    # ------------------------------------------------------------------ public

    def feed(self, samples: np.ndarray) -> None:
        """Push audio (mono float32 in [-1, 1] at 16 kHz). Never waits for the worker."""
        x = np.asarray(samples, dtype=np.float32).reshape(-1)
        if self._input_closed:
            raise RuntimeError(f"stream {self.stream_id!r} is finished")
        if self._t0 is None:
            self._t0 = self.clock.now() - len(x) / SAMPLE_RATE
        self.fed_s += len(x) / SAMPLE_RATE
        self._inbox.append(x)
        self._drain()

    def finish(self) -> None:
        """End of stream: finalise the open utterance (non-blocking; see ``wait_idle``)."""
        if self._input_closed:
            return
        self._input_closed = True
        self._inbox.append(None)
        self._drain()

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Block until all input is processed and no decode of this stream is outstanding;
        False on timeout. With a worker that has no thread, runs its jobs in the calling thread.
        """
        if not self.worker.threaded:
            self.worker.run_pending()
        self._drain()
        with self._idle:
            return self._idle.wait_for(
                lambda: self._outstanding == 0 and not self._inbox and not self._held, timeout
            )

    @property
    def finished(self) -> bool:
        return self._input_closed

    @property
    def language(self) -> str | None:
        """The configured language, or the one detected and locked, or None."""
        return self._language

    def now(self) -> float:
        """Stream time on the clock: seconds since the first sample fed."""
        return self.clock.now() - self._t0 if self._t0 is not None else 0.0

    def stats(self) -> StreamStats:
        """This stream's decode counters from the worker."""
        return self.worker.stream_stats(self.stream_id)

    @property
    def early_finals(self) -> dict[str, int]:
        """Early finals started, used, and voided by speech resuming (`CaptionPolicy`)."""
        with self._lock:
            return dict(self._policy.early_finals)

    @property
    def drops(self) -> dict[str, int]:
        """Voiced finals that ended with no text, by reason (`CaptionPolicy.drops`): each is
        also logged at INFO level."""
        with self._lock:
            return dict(self._policy.drops)

    @property
    def committed_text(self) -> str:
        """All final text so far."""
        with self._lock:
            return self._policy.committed_text

    # ------------------------------------------------------------------ the inbox

    def _drain(self) -> None:
        """Process the inbox if the lock is free now; else its holder does (see the module
        docstring). Re-checks after letting go: input may arrive between the last look and
        the release, while another thread found the lock taken."""
        while self._inbox:
            if not self._lock.acquire(blocking=False):
                return
            try:
                self._drain_locked()
            finally:
                self._lock.release()

    def _drain_locked(self) -> None:
        while True:
            try:
                item = self._inbox.popleft()
            except IndexError:
                break
            try:
                self._process(item)
            except Exception as e:  # noqa: BLE001 - kept for the owner, the stream goes on
                log.exception("stream %r: processing input failed", self.stream_id)
                self.errors.append(e)
        self._idle.notify_all()

    def _process(self, item: _Input) -> None:
        step = Step()
        if item is None:
            if self._finished:
                return
            self._finished = True
            events = self._segmenter.flush()
            now = self.now()
            for ev in events:
                step.extend(self._policy.on_event(ev, now))
            step.extend(self._policy.finish(now))
        else:
            if self.stage is not None:
                self.stage.feed(item)
            events = self._segmenter.push(item)
            now = self.now()
            for ev in events:
                step.extend(self._policy.on_event(ev, now))
            step.extend(self._policy.on_tick(self._segmenter.time, now, self._early_finals()))
        self._apply(step)

    # ------------------------------------------------------------------ internals

    def _apply(self, step: Step) -> None:
        """Deliver captions (in order), then submit requests (caller holds the lock)."""
        self._log_drops()
        self._deliver(step.captions)
        for req in step.requests:
            self._outstanding += 1
            self.worker.submit(self._job(req))

    def _deliver(self, captions: list[CaptionEvent]) -> None:
        """Captions through the stage to ``on_caption``, in order (caller holds the lock); on
        a thread that may not run the stage, held for the stage's thread."""
        if self.stage is not None:
            if self._stage_thread != threading.get_ident() and self.worker.threaded:
                if captions and not self._held:
                    _stage_executor().submit(self._deliver_held)
                self._held += captions
                return
            captions, self._held = self._held + captions, []
            staged: list[CaptionEvent] = []
            for cap in captions:
                try:
                    staged += self.stage.process(cap)
                except Exception:  # a stage's bug must not lose a caption
                    log.exception("caption stage of stream %r failed", self.stream_id)
                    staged.append(cap)
            captions = staged
        for cap in captions:
            if self.on_caption is not None:
                try:
                    self.on_caption(cap)
                except Exception:  # a viewer's bug must not lose the stream's state
                    log.exception("on_caption of stream %r failed", self.stream_id)

    def _deliver_held(self) -> None:
        """On the stage's thread: deliver the held captions, then as `_on_done` does."""
        with self._lock:
            self._stage_thread = threading.get_ident()
            try:
                self._deliver([])
                self._drain_locked()  # input that came while we held the lock (notifies idle)
            finally:
                self._stage_thread = None
        self._drain()

    def _log_drops(self) -> None:
        for d in self._policy.take_drops():
            with _DROPS_LOCK:
                _DROPS_TOTAL[d.reason] = _DROPS_TOTAL.get(d.reason, 0) + 1
            log.info(
                "stream %s: final #%d %.2f-%.2f s dropped (%s)",
                self.stream_id, d.segment, d.start, d.end, describe_drop(d.reason, d.result),
            )  # fmt: skip

    def _early_finals(self) -> bool:
        mode = self.config.early_finals
        if mode != "auto":
            return mode == "on"
        cost = self.worker.costs.job_cost("final")
        return cost is not None and cost <= self.config.early_final_max_cost_s

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
            word_timestamps=req.words and self.config.word_timestamps,
            clock=self.clock,
            tag=req,
            coalesce=self._coalesce
            if req.kind == "final" and self.config.coalesce_finals
            else None,
        )

    def _coalesce(self, prev: DecodeJob, new: DecodeJob) -> DecodeJob | None:
        return coalesce_finals(prev, new, decode=self._text_of)

    def _text_of(self, ids: Sequence[int]) -> str:
        text: str = self.worker.engine.spec.tokenizer.decode(list(ids), skip_special_tokens=True)
        return text

    def _options(self) -> DecodingOptions:
        language = self._language
        if not self.worker.engine.multilingual:
            language = None
        return DecodingOptions(language=language, task=self.config.task)

    def _prepare(self, req: DecodeRequest) -> tuple[DecodingOptions, tuple[int, ...] | None]:
        with self._lock:
            inputs = self._policy.prepare(req)
            options = self._options()
        fixed = self.worker.text_to_ids(self.config.prompt)
        context = self.worker.text_to_ids(inputs.prompt)
        if fixed or context:
            ids = join_prompt_ids(fixed, context, MAX_PROMPT_TOKENS)
            options = replace(options, prompt_ids=ids)
        return options, inputs.hypothesis

    def _on_done(self, job: DecodeJob, outcome: JobOutcome) -> None:
        req: DecodeRequest = job.tag
        with self._lock:
            self._outstanding -= 1
            if outcome.error is not None:
                self.errors.append(outcome.error)
            if self.decode_observer is not None and not outcome.dropped:
                self.decode_observer(job, outcome)
            result = self._lock_language(req, outcome.result)
            self._stage_thread = threading.get_ident()  # the thread that delivers results
            try:
                self._apply(self._policy.on_result(req, result, self.now()))
                self._drain_locked()  # input that came while we held the lock (notifies idle)
            finally:
                self._stage_thread = None
        self._drain()

    def _lock_language(
        self, req: DecodeRequest, result: DecodeResult | None
    ) -> DecodeResult | None:
        """Lock the stream's language from a decode (caller holds the lock); the result to
        give the policy: a partial decoded before the language is known and that did not lock
        it is not shown (None), so no caption ever comes out in another language."""
        if result is None or not self.config.lock_language or not self.worker.engine.multilingual:
            return result
        if self._language is not None:
            # a partial prepared before the lock (in one batch with the final that locked it)
            stray = req.kind == "partial" and result.language not in (None, self._language)
            return None if stray else result
        if req.kind == "final":
            if result.language and result.text.strip():
                self._language = result.language
            return result
        prob = result.language_prob
        sure = (
            result.language is not None
            and prob is not None
            and prob >= LANGUAGE_MIN_PROB
            and req.end - req.start >= LANGUAGE_MIN_SPEECH_S
            and bool(result.text.strip())
        )
        if sure:
            self._language = result.language
            return result
        return None
