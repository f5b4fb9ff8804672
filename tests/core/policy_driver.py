"""The caption policy driven without a model: synthetic segmenter events, a fake decoder
that "hears" a scripted word timeline (for partials it garbles the word still being spoken,
as Whisper does with a window cut mid-word), and a fake clock. Shared by the policy tests."""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

import numpy as np

from streamcap.core.captions import Caption, CaptionLog
from streamcap.core.decode_types import DecodeResult, WordTiming
from streamcap.core.policy import CaptionPolicy
from streamcap.core.policy_config import PolicyConfig
from streamcap.core.policy_window import DecodeRequest, Step
from streamcap.core.segmenter import SpeechAudio, SpeechEnd, SpeechStart

SR = 16000
CHUNK = 0.1


def result(
    text: str,
    tokens: tuple[int, ...] | None = None,
    no_speech: float = 0.01,
    logprob: float | None = -0.2,
    stopped_by: str = "eot",
) -> DecodeResult:
    toks = tokens if tokens is not None else tuple(abs(hash(w)) % 50000 for w in text.split())
    return DecodeResult(toks, text, "en", no_speech, logprob, stopped_by)


@dataclass
class Word:
    text: str
    start: float
    end: float


class FakeDecoder:
    """Hears a word timeline: finals get the words inside the window; partials also get the
    word being spoken at the window's end, cut short (a different stub for each cut)."""

    def __init__(
        self, words: list[Word], wobble: float = 0.0, seed: int = 0, timed: bool = False
    ) -> None:
        self.words = words
        self.wobble = wobble
        self.rng = random.Random(seed)
        self.timed = timed  # give word times when the request asks (as `Engine.align` does)
        self.calls: list[tuple[str, float, float]] = []

    def __call__(self, req: DecodeRequest) -> DecodeResult:
        self.calls.append((req.kind, req.start, req.end))
        eps = 1e-4  # window ends are whole samples
        heard = [w for w in self.words if w.start >= req.start - eps and w.end <= req.end + eps]
        inside = [w.text for w in heard]
        spans = [(w.start, w.end) for w in heard]
        if req.kind == "partial":
            cut = [w for w in self.words if w.start < req.end < w.end - eps]
            if cut:
                inside.append(cut[0].text[: 1 + int((req.end - cut[0].start) * 10) % 4] + "~")
                spans.append((cut[0].start, req.end))
            if inside and self.rng.random() < self.wobble:
                inside[-1] = inside[-1].upper() + "?"
        out = result(" ".join(inside))
        if self.timed and req.words:
            timings = tuple(
                WordTiming(" " + w, max(0.0, a - req.start), b - req.start, 0.9)
                for w, (a, b) in zip(inside, spans, strict=True)
            )
            out = replace(out, words=timings)
        return out


class Driver:
    """A single-processor worker on a fake clock: finals first, each decode costs `cost` s."""

    def __init__(
        self, config: PolicyConfig, decoder: FakeDecoder, cost: float = 0.2, tick: bool = True
    ) -> None:
        self.log = CaptionLog("t")  # the sink: it numbers what the policy emits
        self.policy = CaptionPolicy(config)
        self.decoder = decoder
        self.cost = cost
        self.tick = tick
        self.now = 0.0
        self.busy_until = 0.0
        self.queue: list[DecodeRequest] = []
        self.captions: list[tuple[float, Caption]] = []
        self.requests: list[DecodeRequest] = []
        self.prepared: dict[int, tuple[int, ...] | None] = {}
        self.prompts: dict[int, str] = {}

    def apply(self, step: Step) -> None:
        self.captions += [(self.now, self.log.add(c)) for c in step.captions]
        self.queue += step.requests
        self.requests += step.requests

    def run_until(self, t: float) -> None:
        while self.queue and max(self.now, self.busy_until) < t:
            self.now = max(self.now, self.busy_until)
            finals = [r for r in self.queue if r.kind == "final"]
            req = finals[0] if finals else self.queue[0]
            self.queue.remove(req)
            inputs = self.policy.prepare(req)
            self.prepared[req.id] = inputs.hypothesis
            self.prompts[req.id] = inputs.prompt
            self.now += self.cost
            self.busy_until = self.now
            self.apply(self.policy.on_result(req, self.decoder(req), self.now))
        self.now = max(self.now, t)

    def events(self, events: list[object], stream_time: float) -> None:
        self.run_until(stream_time)
        for ev in events:
            self.apply(self.policy.on_event(ev))  # type: ignore[arg-type]
        if self.tick:
            self.apply(self.policy.on_tick(stream_time))

    def drain(self) -> None:
        self.run_until(float("inf"))

    def finals(self) -> list[Caption]:
        return [c for _, c in self.captions if c.type == "final"]

    def partials(self) -> list[Caption]:
        return [c for _, c in self.captions if c.type == "partial"]


def audio_events(t0: float, t1: float) -> list[tuple[float, list[object]]]:
    """(stream time, events) per 100 ms chunk of speech audio from t0 to t1."""
    out: list[tuple[float, list[object]]] = []
    t = t0
    while t < t1 - 1e-9:
        e = min(t1, t + CHUNK)
        out.append((e, [SpeechAudio(np.zeros(round((e - t) * SR), np.float32), t, e)]))
        t = e
    return out


def utterance(driver: Driver, t0: float, t1: float, hangover: float = 0.4) -> None:
    """One utterance as the segmenter reports it: start, audio as it comes, end after a pause."""
    for i, (t, evs) in enumerate(audio_events(t0, t1)):
        driver.events(([SpeechStart(t0)] if i == 0 else []) + evs, t)
    driver.events([], t1 + 0.2)  # silence the segmenter holds back
    driver.events([SpeechEnd(t0, t1, "silence")], t1 + hangover)


def script(text: str, start: float, word_s: float = 0.4) -> list[Word]:
    return [
        Word(w, start + i * word_s, start + (i + 1) * word_s) for i, w in enumerate(text.split())
    ]


def chunk(t0: float, t1: float, silent: float = 0.0) -> SpeechAudio:
    """Audio from t0 to t1 whose last `silent` seconds are unvoiced (as the segmenter says)."""
    return SpeechAudio(np.zeros(round((t1 - t0) * SR), np.float32), t0, t1, silent)
