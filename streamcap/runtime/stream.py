"""A live caption stream's thread driver: `core.stream.StreamProtocol` on a worker, on threads.

The stream's rules are the protocol's; this module moves its inputs and outputs between
threads. The caption path is one loop (`_run`): a `DroppedFinal` is logged and reported, a
`CaptionEvent` goes through the caption stage (if any) to ``on_caption``, a `DecodeOrder`
becomes a `DecodeJob` for the worker, whose result comes back into the protocol (`_on_done`).

Threads: the feeding one (the server's event loop, a microphone, a replay) never waits for the
worker's. `feed`, `pause` and `finish` put their input in the inbox and process it only if the
stream's lock is free; else its holder (the worker, which holds it only for the protocol's pure
code, never for a decode) drains the inbox before it lets go: nothing is lost or reordered.
``on_caption`` runs on whichever thread processed the event, lock held: it must be quick and
thread-safe. A slow caption stage runs only on the thread that delivers decode results
(`runtime.caption_stage.StagedDelivery`). `runtime.replay` paces a file through a stream.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable

import numpy as np

from streamcap.audio.vad import make_vad
from streamcap.core.captions import CaptionEvent
from streamcap.core.constants import SAMPLE_RATE
from streamcap.core.decode_types import JobInputs
from streamcap.core.live_config import LiveConfig
from streamcap.core.load_shed import LoadShedder
from streamcap.core.policy_window import DroppedFinal
from streamcap.core.stream import DecodeOrder, StreamProtocol
from streamcap.core.text import describe_drop
from streamcap.runtime.caption_stage import CaptionStage, StagedDelivery
from streamcap.runtime.clock import Clock, RealClock
from streamcap.runtime.jobs import DecodeJob, JobOutcome
from streamcap.runtime.worker_api import StreamWorker

__all__ = ["LiveStream"]

log = logging.getLogger(__name__)

#: An inbox item: audio, `_PAUSE` (the audio stopped, the stream goes on) or None (the end).
_PAUSE = "pause"
_Input = np.ndarray | str | None


class LiveStream:
    """One stream's live captioning on ``worker``: ``on_caption`` gets every caption in order,
    unnumbered; ``on_drop`` every voiced final that ended with no text (also logged). Stream
    time starts with the first sample fed (the clock's time then, less that chunk's length).
    ``protocol``: the stream's rules, if not a `StreamProtocol` of ``config`` (its own VAD)."""

    def __init__(
        self,
        stream_id: str,
        worker: StreamWorker,
        on_caption: Callable[[CaptionEvent], None] | None = None,
        config: LiveConfig | None = None,
        clock: Clock | None = None,
        stage: CaptionStage | None = None,
        on_drop: Callable[[DroppedFinal], None] | None = None,
        protocol: StreamProtocol | None = None,
    ) -> None:
        self.stream_id, self.worker, self.stage = stream_id, worker, stage
        self.config = protocol.config if protocol is not None else config or LiveConfig()
        self.clock: Clock = clock or RealClock()
        self.on_caption, self.on_drop = on_caption, on_drop
        self.protocol = protocol or StreamProtocol(self.config, make_vad(self.config.segmenter))
        self._lock = threading.RLock()
        self._idle = threading.Condition(self._lock)
        self._inbox: deque[_Input] = deque()
        self._delivery = StagedDelivery(
            stage, self._lock, worker, self._deliver, self._drain_locked, self._drain
        )
        self._t0: float | None = None  # the clock's time at the stream's first sample
        self._input_closed, self.fed_s = False, 0.0
        self.errors: list[BaseException] = []
        #: Called with every finished decode job of this stream (metrics, evaluation).
        self.decode_observer: Callable[[DecodeJob, JobOutcome], None] | None = None
        #: Called (lock held, any thread: be quick) when the pace of the stream's partials
        #: changes (`core.load_shed`: it fell behind or caught up), with the stream's shedder.
        self.on_pace: Callable[[LoadShedder], None] | None = None
        self._pace_changes = 0

    # ------------------------------------------------------------------ inputs

    def feed(self, samples: np.ndarray) -> None:
        """Push audio (mono float32 in [-1, 1] at 16 kHz). Never waits for the worker."""
        x = np.asarray(samples, dtype=np.float32).reshape(-1)
        if self._input_closed:
            raise RuntimeError(f"stream {self.stream_id!r} is finished")
        if self._t0 is None:
            self._t0 = self.clock.now() - len(x) / SAMPLE_RATE
        self.fed_s += len(x) / SAMPLE_RATE
        self._put(x)

    def pause(self) -> None:
        """The audio stopped but the stream goes on: finalise the open utterance now, as
        silence would (`StreamProtocol.receive_pause`)."""
        if not self._input_closed:
            self._put(_PAUSE)

    def finish(self) -> None:
        """End of stream: finalise the open utterance (see ``wait_idle``)."""
        if not self._input_closed:
            self._input_closed = True
            self._put(None)

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Block until all input is processed and no decode of this stream is outstanding;
        False on timeout. A worker without a thread runs its jobs in the calling thread."""
        self._drain()
        self.worker.wait_idle(timeout, self.stream_id)
        with self._idle:
            return self._idle.wait_for(
                lambda: not self.protocol.outstanding and not self._inbox and self._delivery.idle,
                timeout,
            )

    # ------------------------------------------------------------------ queries

    def now(self) -> float:
        """Stream time on the clock: seconds since the first sample fed."""
        return self.clock.now() - self._t0 if self._t0 is not None else 0.0

    @property
    def language(self) -> str | None:
        """The stream's language (`StreamProtocol.language`; its other figures: ``protocol``,
        read once the stream is idle)."""
        return self.protocol.language

    # ------------------------------------------------------------------ the inbox

    def _put(self, item: _Input) -> None:  # never blocks: see `_drain`
        self._inbox.append(item)
        self._drain()

    def _drain(self) -> None:
        """Process the inbox if the lock is free now, else its holder does. Re-checks after
        letting go: input may come between the last look and the release."""
        while self._inbox:
            if not self._lock.acquire(blocking=False):
                return
            try:
                self._drain_locked()
            finally:
                self._lock.release()

    def _drain_locked(self) -> None:
        p = self.protocol
        while self._inbox:
            item = self._inbox.popleft()
            try:
                if item is None:
                    p.receive_end(self.now())
                elif isinstance(item, str):
                    p.receive_pause(self.now())
                else:
                    if self.stage is not None:
                        self.stage.feed(item)
                    p.receive_final_cost(self.worker.final_cost_s())
                    p.receive_audio(item, self.now())
                self._run()
            except Exception as e:  # noqa: BLE001 - kept for the owner, the stream goes on
                log.exception("stream %r: processing input failed", self.stream_id)
                self.errors.append(e)
        self._idle.notify_all()

    # ------------------------------------------------------------------ the caption path

    def _run(self) -> None:
        """Do what the protocol asks for, in order (caller holds the lock)."""
        captions: list[CaptionEvent] = []
        for out in self.protocol.take_outputs():
            if isinstance(out, DroppedFinal):
                self._report(out)
            elif isinstance(out, CaptionEvent):
                captions.append(out)
            else:
                self._delivery.deliver(captions)
                captions = []
                self.worker.submit(self._job(out))
        self._delivery.deliver(captions)
        shed = self.protocol.load
        if shed.changes != self._pace_changes:
            self._pace_changes = shed.changes
            if self.on_pace is not None:
                try:
                    self.on_pace(shed)
                except Exception:  # a metrics or viewer bug must not stop the stream
                    log.exception("on_pace of stream %r failed", self.stream_id)

    def _deliver(self, captions: list[CaptionEvent]) -> None:
        on_caption = self.on_caption
        if on_caption is None:
            return
        for cap in captions:
            try:
                on_caption(cap)
            except Exception:  # a viewer's bug must not lose the stream's state
                log.exception("on_caption of stream %r failed", self.stream_id)

    def _report(self, d: DroppedFinal) -> None:
        why = describe_drop(d.reason, d.result)
        log.info(
            "stream %s: final #%d %.2f-%.2f s dropped (%s)",
            self.stream_id, d.segment, d.start, d.end, why,
        )  # fmt: skip
        if self.on_drop is not None:
            self.on_drop(d)

    def _job(self, order: DecodeOrder) -> DecodeJob:
        req = order.request
        return DecodeJob(
            self.stream_id, req.kind, req.window, req.audio, self._on_done,
            prepare=lambda: self._prepare(req.id), context_s=order.context_s,
            word_timestamps=order.word_timestamps, clock=self.clock, request=req.id,
            coalescable=order.coalescable,
        )  # fmt: skip

    def _prepare(self, request: int) -> JobInputs:
        with self._lock:
            return self.protocol.prepare(request)

    def _on_done(self, job: DecodeJob, outcome: JobOutcome) -> None:
        with self._lock:
            if outcome.error is not None:
                self.errors.append(outcome.error)
            if self.decode_observer is not None and not outcome.dropped:
                self.decode_observer(job, outcome)
            with self._delivery.on_this_thread():  # the thread that delivers results
                self.protocol.receive_result(job.request, outcome.result, self.now())
                self._run()
                self._drain_locked()  # input that came while we held the lock (notifies idle)
        self._drain()
