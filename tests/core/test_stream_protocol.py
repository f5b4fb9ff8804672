"""The stream protocol (`core.stream.StreamProtocol`) driven with canned decode results: no
model, no thread, no clock. Audio is synthetic (loud noise is "speech" for the energy VAD of
`tests/energy_vad.py`), results are made up, time is a number."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from energy_vad import energy_vad

from streamcap.core.captions import CaptionEvent
from streamcap.core.decode_types import DecodeResult, PromptText
from streamcap.core.live_config import LANGUAGE_MIN_PROB, LANGUAGE_MIN_SPEECH_S, LiveConfig
from streamcap.core.policy_config import PolicyConfig
from streamcap.core.policy_window import DroppedFinal
from streamcap.core.stream import DecodeOrder, StreamEnded, StreamProtocol
from streamcap.core.text import GuardConfig

SR = 16000
RNG = np.random.default_rng(7)


def speech(seconds: float) -> np.ndarray:
    return (0.2 * RNG.standard_normal(round(seconds * SR))).astype(np.float32)


def silence(seconds: float) -> np.ndarray:
    return np.zeros(round(seconds * SR), np.float32)


def result(text: str, language: str | None = "en", prob: float | None = None) -> DecodeResult:
    tokens = tuple(range(1, len(text.split()) + 1))
    return DecodeResult(tokens, text, language, 0.01, -0.1, "eot", language_prob=prob)


class Run:
    """Feeds a protocol 0.1 s at a time and keeps every output it pulls."""

    def __init__(self, config: LiveConfig | None = None, cost: float | None = 0.1) -> None:
        self.p = StreamProtocol(config or LiveConfig(language="en"), energy_vad())
        self.t = 0.0
        self.cost = cost
        self.orders: list[DecodeOrder] = []
        self.captions: list[CaptionEvent] = []
        self.drops: list[DroppedFinal] = []

    def pull(self) -> None:
        for out in self.p.take_outputs():
            if isinstance(out, DecodeOrder):
                self.orders.append(out)
            elif isinstance(out, CaptionEvent):
                self.captions.append(out)
            else:
                self.drops.append(out)

    def feed(self, audio: np.ndarray, drop_partials: bool = False) -> None:
        """``audio`` 0.1 s at a time; ``drop_partials``: answer each partial order but the
        last with None (the worker dropped it), so that the next one is asked for."""
        for i in range(0, len(audio), SR // 10):
            chunk = audio[i : i + SR // 10]
            self.t += len(chunk) / SR
            self.p.receive_final_cost(self.cost)
            self.p.receive_audio(chunk, self.t)
            self.pull()
            if drop_partials and i + SR // 10 < len(audio):
                for order in self.pending("partial"):
                    if order.request.id in self.p._orders:
                        self.answer(order, None)

    def answer(self, order: DecodeOrder, res: DecodeResult | None) -> None:
        self.p.receive_result(order.request.id, res, self.t)
        self.pull()

    def pending(self, kind: str) -> list[DecodeOrder]:
        return [o for o in self.orders if o.request.kind == kind]


def test_the_caption_path_audio_to_orders_to_captions() -> None:
    run = Run()
    run.feed(speech(2.5))
    partials = run.pending("partial")
    assert partials, "a window of speech asks for partial decodes"
    assert not run.pending("final") and not run.captions
    run.answer(partials[0], result("hello there"))
    assert [c.type for c in run.captions] == ["partial"]
    run.feed(silence(1.0))  # the pause closes the window: its final is ordered
    for order in run.pending("partial")[1:]:  # asked for meanwhile, answered late: not shown
        run.answer(order, result("hello there"))
    finals = run.pending("final")
    assert len(finals) == 1 and finals[0].context_s is None and finals[0].word_timestamps
    run.answer(finals[0], result("Hello there."))
    assert run.captions[-1].type == "final" and run.captions[-1].text == "Hello there."
    assert run.p.committed_text.strip() == "Hello there." and run.p.outstanding == 0


def test_outputs_come_once_in_order_drops_captions_then_orders() -> None:
    guard = GuardConfig(no_speech_threshold=0.0, logprob_threshold=0.0)  # every final dropped
    run = Run(LiveConfig(language="en", policy=PolicyConfig(guard=guard)))
    run.feed(speech(1.5))
    run.p.receive_end(run.t)
    outs = run.p.take_outputs()
    assert outs and isinstance(outs[-1], DecodeOrder) and run.p.take_outputs() == []
    final = next(o for o in outs if isinstance(o, DecodeOrder) and o.request.kind == "final")
    run.p.receive_result(final.request.id, result("words"), run.t)
    outs = run.p.take_outputs()
    assert isinstance(outs[0], DroppedFinal) and outs[0].reason == "no_speech"
    assert run.p.drops == {"no_speech": 1}


def test_partial_context_is_the_window_plus_a_margin_finals_the_standard_input() -> None:
    cfg = LiveConfig(language="en", partial_context_margin_s=2.0, partial_context_min_s=3.0)
    run = Run(cfg)
    run.feed(speech(4.5), drop_partials=True)
    assert len(run.pending("partial")) >= 3
    for order in run.pending("partial"):
        req = order.request
        assert order.context_s == pytest.approx(max(3.0, req.end - req.start + 2.0))
    run = Run(replace(cfg, partial_context_margin_s=None))
    run.feed(speech(2.5))
    assert all(o.context_s is None for o in run.orders)


def test_early_finals_follow_the_measured_cost() -> None:
    cheap, dear = 0.2, LiveConfig().early_final_max_cost_s + 0.1
    for cost, early in ((cheap, True), (dear, False), (None, False)):
        run = Run(LiveConfig(language="en"), cost=cost)
        run.feed(speech(2.0))
        run.feed(silence(0.15))  # past early_final_s, before the pause is confirmed
        assert bool(run.pending("final")) is early, cost
        assert run.p.early_finals["started"] == int(early)
    run = Run(LiveConfig(language="en", early_finals="off"), cost=cheap)
    run.feed(speech(2.0))
    run.feed(silence(0.15))
    assert not run.pending("final")


def test_prepare_gives_options_and_prompt_text_not_tokens() -> None:
    run = Run(LiveConfig(language="de", task="translate", prompt="Kubernetes, Nguyen."))
    run.feed(speech(2.5))
    order = run.orders[-1]
    inputs = run.p.prepare(order.request.id)
    assert inputs.options.language == "de" and inputs.options.task == "translate"
    assert inputs.options.prompt_ids == ()  # the job runner tokenizes
    assert inputs.prompt == PromptText("Kubernetes, Nguyen.", "")
    run.answer(order, result("x"))
    with pytest.raises(KeyError):
        run.p.prepare(order.request.id)  # no longer outstanding


def _window(seconds: float) -> tuple[Run, DecodeOrder]:
    """A stream of unknown language with a partial of about ``seconds`` outstanding."""
    run = Run(LiveConfig(language=None))
    run.feed(speech(seconds), drop_partials=True)
    while not run.p.outstanding:
        run.feed(speech(0.1))
    order = run.pending("partial")[-1]
    req = order.request
    assert seconds - 1.1 <= req.end - req.start <= seconds + 1.1, (req.start, req.end)
    return run, order


def test_partials_wait_for_the_language_and_a_final_locks_it() -> None:
    run, order = _window(5.0)
    run.answer(order, result("שלום", "he", 0.5))  # unsure: not shown, nothing locked
    assert not run.captions and run.p.language is None
    run, order = _window(LANGUAGE_MIN_SPEECH_S / 2)
    assert order.request.end - order.request.start < LANGUAGE_MIN_SPEECH_S
    run.answer(order, result("hello", "en", 0.99))  # sure but too short
    assert not run.captions and run.p.language is None
    run.feed(speech(1.1))
    assert run.p.prepare(run.pending("partial")[-1].request.id).options.language is None
    run.feed(silence(1.0))
    run.answer(run.pending("final")[-1], result("hello there", "en", 0.6))
    assert run.p.language == "en" and run.captions[-1].type == "final"
    run.feed(speech(2.5))
    later = run.pending("partial")[-1]
    assert run.p.prepare(later.request.id).options.language == "en"
    run.answer(later, result("hola amigo", "es", None))  # a stray partial: not shown
    assert run.captions[-1].type == "final"


def test_a_sure_long_partial_locks_the_language() -> None:
    run, order = _window(LANGUAGE_MIN_SPEECH_S + 0.5)
    assert order.request.end - order.request.start >= LANGUAGE_MIN_SPEECH_S
    run.answer(order, result("hello there", "en", LANGUAGE_MIN_PROB))
    assert run.p.language == "en" and run.captions[-1].type == "partial"


def test_auto_each_keeps_every_result_and_locks_nothing() -> None:
    run = Run(LiveConfig(language=None, lock_language=False))
    run.feed(speech(1.5))
    run.answer(run.pending("partial")[-1], result("hola", "es", 0.3))
    assert run.captions and run.p.language is None


def test_an_english_only_model_names_no_language_and_is_shown_at_once() -> None:
    run, order = _window(1.5)
    run.answer(order, result("hello", None, None))
    assert run.captions and run.p.language is None


def test_the_end_finalises_once_and_refuses_more_audio() -> None:
    run = Run()
    run.feed(speech(1.5))
    run.p.receive_end(run.t)
    run.pull()
    assert len(run.pending("final")) == 1
    run.p.receive_end(run.t)
    assert run.p.take_outputs() == []
    with pytest.raises(StreamEnded):
        run.p.receive_audio(speech(0.1), run.t)


def test_a_pause_ends_the_open_utterance_and_the_stream_goes_on() -> None:
    run = Run()
    run.feed(speech(1.5))
    assert not run.pending("final")
    run.p.receive_pause(run.t)  # a publisher gone quiet mid-sentence
    run.pull()
    assert len(run.pending("final")) == 1
    analysed = run.p.analysed_s
    run.feed(speech(1.5))  # speech again: a new utterance, stream time counts audio only
    assert run.p.analysed_s == pytest.approx(analysed + 1.5, abs=0.03)
    run.p.receive_end(run.t)
    run.pull()
    assert len(run.pending("final")) == 2
    windows = [o.request.window for o in run.pending("final")]
    assert windows[0] != windows[1]
