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
(`_stage_executor`), and every caption after them waits behind them.

`replay` feeds a whole file through a stream at the pace of a clock, with the one pacer
(`clock.paced_chunks`): on a real clock it sleeps and the worker's thread runs; on the
computation-aware `SimulatedClock` the worker is stepped in the replaying thread so that each job
starts exactly when one processor would have been free, and audio that arrived meanwhile is fed
first.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol

import numpy as np

from streamcap.core.captions import CaptionEvent
from streamcap.core.constants import SAMPLE_RATE
from streamcap.core.decode_types import DecodeResult, DecodingOptions
from streamcap.core.policy import (
    PARTIAL_CONTEXT_MARGIN_S,
    PARTIAL_CONTEXT_MIN_S,
    CaptionPolicy,
    DecodeRequest,
    PolicyConfig,
    Step,
)
from streamcap.core.prompting import join_prompt_ids
from streamcap.core.segmenter import Segmenter, SegmenterConfig
from streamcap.core.text import describe_drop
from streamcap.decoding.spec import MAX_PROMPT_TOKENS
from streamcap.runtime.clock import Clock, RealClock, SimulatedClock, paced_chunks
from streamcap.runtime.coalesce import coalesce_finals
from streamcap.runtime.jobs import DecodeJob, JobOutcome, StreamStats
from streamcap.runtime.worker_api import Worker

log = logging.getLogger(__name__)

#: A partial locks the stream's language from its own detection only when its audio is at
#: least this long and the language's probability at least `LANGUAGE_MIN_PROB`; otherwise the
#: first final does. Measured with base on dev clips (../shared/eval-dev/manifest.jsonl, first
#: 1/2/3 s and whole clip): real English (en_real_cards_001..003) en at 0.86-0.96 from 1 s;
#: espeak TTS de/es/fr/nl often wrong even whole and even at high probability (fr_s02: th 0.87
#: at 3 s, es_s01: th 0.60), right ones 0.4-0.97. So a partial locks only when nearly sure;
#: the rest wait for the final, as before.
LANGUAGE_MIN_SPEECH_S = 3.0
LANGUAGE_MIN_PROB = 0.95
#: The language "code" that asks for detection in every utterance (people who switch).
AUTO_EACH = "auto-each"


def split_language(language: str | None) -> tuple[str | None, bool]:
    """A language setting (a code, None: detect once per stream, `AUTO_EACH`: detect in every
    utterance) as (``language``, ``lock_language``)."""
    if language == AUTO_EACH:
        return None, False
    return language, True


#: Finals dropped with no text by every `LiveStream` of the process, by reason (the server's
#: /metrics reads it at scrape time: `finals_dropped`).
_DROPS_TOTAL: dict[str, int] = {}
_DROPS_LOCK = threading.Lock()


def finals_dropped() -> dict[str, int]:
    """Voiced finals dropped with no text by all live streams of this process, by reason."""
    with _DROPS_LOCK:
        return dict(_DROPS_TOTAL)


_STAGE_EXECUTOR: ThreadPoolExecutor | None = None
_STAGE_EXECUTOR_LOCK = threading.Lock()


def _stage_executor() -> ThreadPoolExecutor:
    """The process's one thread for caption stages the feeding thread may not run."""
    global _STAGE_EXECUTOR
    with _STAGE_EXECUTOR_LOCK:
        if _STAGE_EXECUTOR is None:
            _STAGE_EXECUTOR = ThreadPoolExecutor(1, thread_name_prefix="caption-stage")
        return _STAGE_EXECUTOR


#: An inbox item: audio to feed, or None for the end of the stream.
_Input = np.ndarray | None


class CaptionStage(Protocol):
    """A stage between the policy and the sink (e.g. speaker labels from the voice).

    It sees the stream's audio in order (`feed`, 16 kHz mono from stream time 0) and every
    caption event in order (`process`), and answers with the events to deliver instead: the
    same, relabelled, or a final split in two (it then renumbers later segments itself). Both
    run with the stream's lock held: `feed` on the thread that processes the input, `process`
    never on the feeding thread (module docstring), so it may take its time.
    """

    def feed(self, samples: np.ndarray) -> None: ...

    def process(self, event: CaptionEvent) -> list[CaptionEvent]: ...


@dataclass(frozen=True)
class LiveConfig:
    """Everything a live stream is tuned by.

    - language: spoken language code, or None to detect it. With ``lock_language`` (the
      default) it is detected once per stream and kept for every later decode: until it is
      known no partial is shown (a partial's own detection locks it only from at least
      `LANGUAGE_MIN_SPEECH_S` of audio at probability >= `LANGUAGE_MIN_PROB`), and otherwise
      the first non-empty final's detected language is locked (a final's audio is the best
      evidence). ``lock_language=False`` ("auto-each"): every decode detects its own.
    - task: "transcribe" or "translate" (to English).
    - partial_context_margin_s: partials run the encoder on the window's audio plus this margin
      (seconds) instead of the standard 30 s; None: partials use the standard input too.
    - partial_context_min_s: the shortest encoder context a partial gets.
    - early_finals: start a window's exact final at the beginning of a pause
      (`PolicyConfig.early_final_s`) rather than when the pause is confirmed. A pause that turns
      out to be a breath voids that decode: its compute is lost, and no partial runs meanwhile.
      "auto": only while a final costs at most `early_final_max_cost_s` on this worker (measured
      on lf3 with tiny.en, finals of 0.46 s: final latency p50 0.65 -> 0.54 s, p95 0.80 ->
      0.70 s, 26 of 108 early finals voided, WER +0.16 points; with base on a 2-core CPU
      without bf16, finals of 1.0 s, the voided ones delayed other decodes: p95 1.66 ->
      1.83 s).
    - prompt: the stream's own prompt text (`core.prompting.stream_prompt`: words the model
      should know), before the policy's context in every decode's prompt.
    - coalesce_finals: a final submitted while the stream's previous final still waits,
      unstarted, is decoded with it as one window and the result split at the word times
      (`runtime.coalesce`): a backlog costs one encoder call instead of one per final. Off by
      default: measured on the tempo-1.3 hard file (README), Whisper's no-timestamps decode of
      a joined window often stops after its first sentence, the final it cut short is decoded
      again alone, and the first final waits for both: latency and WER rose.
    - word_timestamps: time the words of the decodes the policy asks for (`Engine.align`: one
      more decoder pass, 5-9 % of a final's cost): every final, and the partials that may
      commit words (the policy cuts the window at their end).
    """

    language: str | None = None
    task: str = "transcribe"
    segmenter: SegmenterConfig = field(default_factory=SegmenterConfig)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    lock_language: bool = True
    partial_context_margin_s: float | None = PARTIAL_CONTEXT_MARGIN_S
    partial_context_min_s: float = PARTIAL_CONTEXT_MIN_S
    word_timestamps: bool = True
    coalesce_finals: bool = False
    early_finals: Literal["auto", "on", "off"] = "auto"
    early_final_max_cost_s: float = 0.6
    prompt: str = ""

    def __post_init__(self) -> None:
        if self.early_finals not in ("auto", "on", "off"):
            raise ValueError("early_finals must be 'auto', 'on' or 'off'")
        if self.task not in ("transcribe", "translate"):
            raise ValueError(f"task must be 'transcribe' or 'translate', got {self.task!r}")
        if self.segmenter.max_utterance_s > self.policy.max_window_s:
            raise ValueError("segmenter.max_utterance_s must fit in policy.max_window_s")
        if self.partial_context_margin_s is not None and self.partial_context_margin_s < 0:
            raise ValueError("partial_context_margin_s must be >= 0")


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
            coalesce=self._coalesce if req.kind == "final" and self.config.coalesce_finals
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


class _SteppingClock:
    """A `SimulatedClock` seen by the pacer: waiting until a time first runs the worker's jobs
    that start before it, so one processor's compute and the audio's arrival interleave as live."""

    def __init__(self, clock: SimulatedClock, worker: Worker) -> None:
        self._clock = clock
        self._worker = worker

    def now(self) -> float:
        return self._clock.now()

    def wait_until(self, t: float) -> None:
        while self._clock.now() < t and self._worker.run_one():
            pass
        self._clock.wait_until(t)

    def charge(self, seconds: float) -> None:
        self._clock.charge(seconds)

    def measure(self) -> Any:
        return self._clock.measure()


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
    pace: Clock = _SteppingClock(clock, worker) if isinstance(clock, SimulatedClock) else clock
    for chunk in paced_chunks(audio, chunk_s, pace, SAMPLE_RATE, speed):
        stream.feed(chunk)
    if finish:
        stream.finish()
        stream.wait_idle()
