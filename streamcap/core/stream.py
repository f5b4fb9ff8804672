"""One live stream as a sans-I/O object: audio and decode results in, decode orders out.

The shape of `websockets`' ``Protocol`` and h11's ``Connection``: the inputs
(`StreamProtocol.receive_audio`, `receive_pause`, `receive_end`, `receive_result`,
`receive_final_cost`) change
the stream's state and queue what it must do; the caller pulls that, in order, with
`take_outputs` and does the I/O: a `DecodeOrder` goes to a worker, a `CaptionEvent` to the sink,
a `DroppedFinal` to the log. No threads, no clock, no model: time is an input (``now``, stream
seconds on the caller's clock), and a decode is an order whose result comes back as an input.
So the tests drive it with canned results (tests/core/test_stream_protocol.py), and the thread
driver (`runtime.stream.LiveStream`), the replay and the evaluation recorder drive this one
object: a stream's decisions are made here and nowhere else.

What it decides, beside the segmenter and the caption policy it wires together:
- **The language lock** (`LiveConfig.lock_language`): the first language a decode is sure of is
  kept for every later decode; until then no partial is shown (`_lock_language`).
- **Early finals** (`LiveConfig.early_finals`): "auto" allows them while a final costs at most
  `LiveConfig.early_final_max_cost_s` on the worker; the measured cost is an input
  (`receive_final_cost`), as the worker measures it.
- **A partial's encoder context** (`LiveConfig.partial_context_margin_s`): the window plus a
  margin, never less than `partial_context_min_s`; finals get the standard 30 s.
- **Decode options and prompt text** (`prepare`): the language, the task, the stream's own
  prompt and the policy's context, as text (`core.decode_types.PromptText`).
- **Load shedding** (`LiveConfig.load_shed`, `core.load_shed`): at every input the stream
  measures how far behind it is (its oldest decode not back, with the measured final cost of
  those waiting behind it, or the latency of the latest decode back, whichever is more) and
  thins, then pauses, its partials until it catches up; the figures are `load`.
- **The drop tally** (`drops`): voiced finals that ended with no text, by reason; each is also
  an output, for the caller's log and metrics.

An English-only model names no language in its results (``DecodeResult.language`` is None); the
lock leaves such results alone, and the job runner drops the language from the options of a
model that has only one (`runtime.jobs.DecodeJob.prepared`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from streamcap.core.captions import CaptionEvent
from streamcap.core.decode_types import DecodeResult, DecodingOptions, JobInputs, PromptText
from streamcap.core.live_config import LANGUAGE_MIN_PROB, LANGUAGE_MIN_SPEECH_S, LiveConfig
from streamcap.core.load_shed import LoadShedder, behind_s
from streamcap.core.policy import CaptionPolicy
from streamcap.core.policy_window import DecodeRequest, DroppedFinal, Step
from streamcap.core.segmenter import Segmenter, VadFn

__all__ = ["DecodeOrder", "StreamOutput", "StreamProtocol", "StreamEnded"]


class StreamEnded(RuntimeError):
    """Audio given to a stream after its end (`StreamProtocol.receive_end`)."""


@dataclass(frozen=True, eq=False)
class DecodeOrder:
    """Decode ``request``'s audio: on an encoder context of ``context_s`` seconds (None: the
    standard 30 s), with its words timed when ``word_timestamps``; ``coalescable`` finals may
    share a window with the stream's next final (`runtime.coalesce`). Its result comes back
    through `StreamProtocol.receive_result` with ``request.id``; its options, prompt and draft
    come from `StreamProtocol.prepare` when it starts."""

    request: DecodeRequest
    context_s: float | None
    word_timestamps: bool
    coalescable: bool


#: What the caller pulls: a final dropped (log it), a caption (deliver it), a decode (submit it).
StreamOutput = DroppedFinal | CaptionEvent | DecodeOrder


#: Seconds after its last decode came back, with none out, a stream counts as caught up (a pause
#: in the speech: the worker has nothing of it to do).
RECENT_S = 2.0


class StreamProtocol:
    """One stream's rules (see the module docstring). Not thread-safe: its driver serialises
    the calls (`runtime.stream.LiveStream` holds its lock around each). ``vad`` is the
    segmenter's detector (`streamcap.audio.vad`; None: webrtcvad); ``policy`` a caption policy
    made for ``config.policy`` (None: a new `CaptionPolicy`; the evaluation's recorder hands in
    one that records its calls)."""

    def __init__(
        self,
        config: LiveConfig | None = None,
        vad: VadFn | None = None,
        policy: CaptionPolicy | None = None,
    ) -> None:
        self.config = config or LiveConfig()
        self._segmenter = Segmenter(self.config.segmenter, vad)
        self._policy = policy if policy is not None else CaptionPolicy(self.config.policy)
        self._language = self.config.language
        self._final_cost: float | None = None
        self._orders: dict[int, DecodeRequest] = {}  # submitted, result not yet received
        self._outputs: list[StreamOutput] = []
        self._ended = False
        self._shedder = LoadShedder(self.config.load_shed)
        self._last_latency = 0.0  # of the latest decode back: behind until one comes back sooner
        self._last_back = 0.0  # ... and when it came (a stream idle since has caught up)

    # ------------------------------------------------------------------ inputs

    def receive_audio(self, samples: np.ndarray, now: float) -> None:
        """Audio (mono float32 in [-1, 1] at 16 kHz, any length) that arrived at stream time
        ``now``. StreamEnded after `receive_end`."""
        if self._ended:
            raise StreamEnded("the stream has ended")
        step = Step()
        self._shed(now)
        for event in self._segmenter.push(samples):
            step.extend(self._policy.on_event(event, now))
        step.extend(self._policy.on_tick(self._segmenter.time, now, self._early_finals()))
        self._queue(step)

    def receive_pause(self, now: float) -> None:
        """The audio stopped for a while but the stream goes on (a publisher gone quiet with
        its socket open): the open utterance ends here, as at the end of the stream, and the
        next audio starts a new one. Stream time does not move: it counts audio."""
        if self._ended:
            return
        step = Step()
        for event in self._segmenter.flush():
            step.extend(self._policy.on_event(event, now))
        self._queue(step)

    def receive_end(self, now: float) -> None:
        """The end of the stream's audio: the open utterance is finalised (its decode is
        ordered). Once; later calls do nothing."""
        if self._ended:
            return
        self._ended = True
        step = Step()
        for event in self._segmenter.flush():
            step.extend(self._policy.on_event(event, now))
        step.extend(self._policy.finish(now))
        self._queue(step)

    def receive_result(self, request: int, result: DecodeResult | None, now: float) -> None:
        """The result of the order for ``request`` (None: the worker dropped it or failed)."""
        req = self._orders.pop(request, None)
        if req is None:
            return
        self._last_latency, self._last_back = max(0.0, now - req.end), now
        self._shed(now)
        self._queue(self._policy.on_result(req, self._lock_language(req, result), now))

    def receive_final_cost(self, seconds: float | None) -> None:
        """What one final costs on the worker now, as it measures it (None: not known yet)."""
        self._final_cost = seconds

    # ------------------------------------------------------------------ outputs

    def take_outputs(self) -> list[StreamOutput]:
        """What the inputs so far produced, oldest first, each once: per input its dropped
        finals, then its captions, then its decode orders."""
        out, self._outputs = self._outputs, []
        return out

    def prepare(self, request: int) -> JobInputs:
        """Options, prompt text and draft for ``request``'s decode, as of now (its job has
        started: every result received before is reflected)."""
        req = self._orders.get(request)
        if req is None:
            raise KeyError(f"no decode order {request} is outstanding")
        inputs = self._policy.prepare(req)
        options = DecodingOptions(language=self._language, task=self.config.task)
        prompt = PromptText(self.config.prompt, inputs.prompt)
        return JobInputs(options, prompt, inputs.hypothesis)

    # ------------------------------------------------------------------ queries

    @property
    def ended(self) -> bool:
        return self._ended

    @property
    def language(self) -> str | None:
        """The configured language, or the one detected and locked, or None."""
        return self._language

    @property
    def outstanding(self) -> int:
        """Decode orders given out whose result has not been received."""
        return len(self._orders)

    @property
    def analysed_s(self) -> float:
        """Audio seconds the segmenter has analysed."""
        return self._segmenter.time

    @property
    def quiet(self) -> tuple[float, float]:
        """Where (stream seconds) its microphone heard no speech and no utterance can start
        (`Segmenter.quiet`): a room's cross-talk check need not wait for this publisher's
        captions of that time. Safe to read from any thread."""
        return self._segmenter.quiet

    @property
    def early_finals(self) -> dict[str, int]:
        """Early finals started, used, and voided by speech resuming (`CaptionPolicy`)."""
        return dict(self._policy.early_finals)

    @property
    def drops(self) -> dict[str, int]:
        """Voiced finals that ended with no text, by reason (`CaptionPolicy.drops`)."""
        return dict(self._policy.drops)

    @property
    def load(self) -> LoadShedder:
        """How far behind the stream is and the pace of its partials (`core.load_shed`)."""
        return self._shedder

    @property
    def committed_text(self) -> str:
        """All final text so far."""
        return self._policy.committed_text

    # ------------------------------------------------------------------ rules

    def _queue(self, step: Step) -> None:
        self._outputs += self._policy.take_drops()
        self._outputs += step.captions
        for req in step.requests:
            self._orders[req.id] = req
            self._outputs.append(self._order(req))

    def _order(self, req: DecodeRequest) -> DecodeOrder:
        """The partial-context rule, word timing and coalescing for ``req``."""
        cfg = self.config
        context = None
        if req.kind == "partial" and cfg.partial_context_margin_s is not None:
            context = max(
                cfg.partial_context_min_s, req.end - req.start + cfg.partial_context_margin_s
            )
        return DecodeOrder(
            request=req,
            context_s=context,
            word_timestamps=req.words and cfg.word_timestamps,
            coalescable=req.kind == "final" and cfg.coalesce_finals,
        )

    def _shed(self, now: float) -> None:
        """Measure how far behind the stream is and set its partials' pace (`core.load_shed`)."""
        ends = [r.end for r in self._orders.values()]
        sh = self._shedder
        recent = self._last_latency if ends or now - self._last_back < RECENT_S else 0.0
        sh.update(now, max(recent, behind_s(now, ends, self._final_cost)))
        self._policy.set_pace(sh.interval_scale(), sh.partial_beside_final)

    def _early_finals(self) -> bool:
        mode = self.config.early_finals
        if mode != "auto":
            return mode == "on"
        cost = self._final_cost
        return cost is not None and cost <= self.config.early_final_max_cost_s

    def _lock_language(
        self, req: DecodeRequest, result: DecodeResult | None
    ) -> DecodeResult | None:
        """Lock the stream's language from a decode; the result to give the policy: a partial
        decoded before the language is known that did not lock it is not shown (None), so no
        caption ever comes out in another language."""
        if result is None or not self.config.lock_language or result.language is None:
            return result  # (None: an English-only model, which names no language)
        if self._language is not None:
            # a partial prepared before the lock (in one batch with the final that locked it)
            stray = req.kind == "partial" and result.language != self._language
            return None if stray else result
        if req.kind == "final":
            if result.text.strip():
                self._language = result.language
            return result
        prob = result.language_prob
        sure = (
            prob is not None
            and prob >= LANGUAGE_MIN_PROB
            and req.end - req.start >= LANGUAGE_MIN_SPEECH_S
            and bool(result.text.strip())
        )
        if sure:
            self._language = result.language
            return result
        return None
