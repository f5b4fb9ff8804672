"""Caption policy, driven with synthetic segmenter events and a fake decoder on a fake clock.

The fake decoder stands in for the model (pure logic under test): it "hears" a scripted word
timeline, returns the words a window holds, and for partials garbles the word still being
spoken, as Whisper does with a window cut mid-word.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

import numpy as np
import pytest

from streamcap.core.captions import Caption, CaptionLog
from streamcap.core.decode_types import DecodeResult, WordTiming
from streamcap.core.policy import CaptionPolicy, DecodeRequest, PolicyConfig, Step
from streamcap.core.segmenter import SpeechAudio, SpeechEnd, SpeechStart
from streamcap.core.text import align_prefix, is_hallucination, norm_text, trim_loop, trim_restart

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


# --------------------------------------------------------------------------- helpers


def test_align_prefix_skips_committed_words_even_when_reworded() -> None:
    assert align_prefix([], ["a", "b"]) == 0
    assert align_prefix(["Hello,", "world"], ["hello", "world.", "again"]) == 2
    assert align_prefix(["a", "b", "c"], ["a", "x", "c", "d"]) == 3  # a word changed
    assert align_prefix(["a", "b", "c"], ["a", "c", "d"]) == 2  # a word dropped
    assert align_prefix(["a", "b"], ["a", "b", "b", "e"]) == 2


def test_loop_and_restart_trimming() -> None:
    assert trim_loop(["we", "are", "we", "are", "we", "are", "we", "are"]) == ["we", "are"]
    assert trim_loop(["one", "two", "three"]) == ["one", "two", "three"]
    assert trim_restart(["We", "could", "but.", "We", "could", "but."]) == ["We", "could", "but."]
    assert trim_restart(["It", "is", "what", "it", "is"]) == ["It", "is", "what", "it", "is"]


def test_hallucination_rules() -> None:
    cfg = PolicyConfig().guard
    assert is_hallucination(result("Thank you.", no_speech=0.3), cfg)
    assert not is_hallucination(result("Thank you.", no_speech=0.02), cfg)  # people say it
    assert is_hallucination(result("blah blah", no_speech=0.8, logprob=-1.2), cfg)
    assert is_hallucination(result("I", no_speech=0.2, logprob=-3.3), cfg)  # music
    assert not is_hallucination(result("clear speech", no_speech=0.8, logprob=-0.3), cfg)
    assert norm_text("Thanks for watching!") == "thanks for watching"


def test_config_is_validated() -> None:
    with pytest.raises(ValueError):
        PolicyConfig(partial_interval_s=0)
    with pytest.raises(ValueError):
        PolicyConfig(agreement=1)
    with pytest.raises(ValueError):
        PolicyConfig(max_window_s=31)


# --------------------------------------------------------------------------- decisions


def test_partials_every_interval_then_an_exact_final_at_speech_end() -> None:
    words = script("the quick brown fox jumps over the lazy dog", 0.5)
    cfg = PolicyConfig(partial_interval_s=1.0, pause_final_s=None, agreement=0)
    d = Driver(cfg, FakeDecoder(words))
    utterance(d, 0.2, 4.3)
    d.drain()
    partials = [r for r in d.requests if r.kind == "partial"]
    finals = [r for r in d.requests if r.kind == "final"]
    # one partial per second of new audio, each decoding the whole window so far
    assert [round(r.end - r.start, 1) for r in partials] == [1.0, 2.0, 3.0, 4.0]
    assert all(r.start == pytest.approx(0.2) for r in partials)
    assert len(finals) == 1 and finals[0].end == pytest.approx(4.3)
    caps = d.finals()
    assert [c.text for c in caps] == ["The quick brown fox jumps over the lazy dog"]
    assert [c.seq for _, c in d.captions] == list(range(1, len(d.captions) + 1))
    assert all(c.segment == 1 for _, c in d.captions)
    # the hypothesis handed to each decode is the previous partial's tokens
    hyps = [d.prepared[r.id] for r in d.requests]
    assert hyps[0] is None and all(h for h in hyps[1:])


def test_partials_show_locked_words_as_committed() -> None:
    words = script("one two three four five six seven eight nine ten", 0.0, 0.5)
    cfg = PolicyConfig(partial_interval_s=1.0, pause_final_s=None, agreement=2)
    d = Driver(cfg, FakeDecoder(words))
    utterance(d, 0.0, 5.0)
    d.drain()
    partials = d.partials()
    locked = [p.text[: p.committed_chars] for p in partials]
    assert any(locked)  # words agreed by two partials are shown as committed
    final = " ".join(c.text for c in d.finals())
    assert norm_text(final) == "one two three four five six seven eight nine ten"
    for p, lk in zip(partials, locked, strict=True):  # the committed prefix never changes
        assert norm_text(final).startswith(norm_text(lk)), (p.text, final)


def _locked_window(cfg: PolicyConfig, partial_text: str, final_text: str) -> list[Caption]:
    """Two agreeing partials lock words, then the window's exact decode says `final_text`."""
    pol = CaptionPolicy(cfg)
    pol.on_event(SpeechStart(0.0))
    caps: list[Caption] = []
    for k in (1, 2):
        ev = SpeechAudio(np.zeros(SR, np.float32), k - 1.0, float(k))
        (req,) = pol.on_event(ev).requests
        caps += pol.on_result(req, result(partial_text), k + 0.1).captions
    (final,) = pol.on_event(SpeechEnd(0.0, 2.0, "silence")).requests
    return caps + pol.on_result(final, result(final_text), 2.5).captions


def test_exact_final_corrects_locked_words_but_keeps_their_shown_form() -> None:
    cfg = PolicyConfig(partial_interval_s=1.0, pause_final_s=None, holdback_words=0)
    caps = _locked_window(cfg, "the Cat, sat on the mat", "The bat sat on the mat.")
    partial = caps[-2]
    # the last word of a partial is never locked (it may be cut mid-word)
    assert partial.type == "partial" and partial.text[: partial.committed_chars] == (
        "The Cat, sat on the"
    )
    assert caps[-1].type == "final" and caps[-1].text == "The bat sat on the mat."
    caps = _locked_window(cfg, "and so my friends", "And so, my friends.")
    assert caps[-1].text == "And so my friends."  # case and an added comma: as shown,
    caps = _locked_window(cfg, "and So, my friends", "And so my friends.")  # a dropped comma
    assert caps[-1].text == "And So, my friends."  # stays; the added full stop is taken
    kept = _locked_window(replace(cfg, exact_finals=False), "the Cat, sat", "The bat sat.")
    assert kept[-1].text == "The Cat, sat."


def test_long_monologue_commits_sentences_before_it_ends() -> None:
    text = " ".join(f"w{i}." if i % 6 == 5 else f"w{i}" for i in range(40))  # 6-word sentences
    words = script(text, 0.0, 0.4)
    cfg = PolicyConfig(partial_interval_s=1.0, pause_final_s=None)
    d = Driver(cfg, FakeDecoder(words))
    utterance(d, 0.0, 16.0)
    d.drain()
    finals = d.finals()
    assert len(finals) >= 4  # parts of the utterance were finalised while it went on
    early = [(t, c) for t, c in d.captions if c.type == "final" and t < 16.0]
    assert early, "nothing was committed before the utterance ended"
    assert all(c.text.rstrip().endswith(".") for _, c in early)
    assert norm_text(" ".join(c.text for c in finals)) == norm_text(text)
    assert len({c.segment for c in finals}) == len(finals)  # one final per segment


def test_a_pause_closes_the_window_early_and_speech_resumes_in_a_new_one() -> None:
    words = script("good morning everyone", 0.0, 0.4) + script("let us begin now", 2.0, 0.4)
    cfg = PolicyConfig(partial_interval_s=1.0, pause_final_s=0.0, agreement=0)
    d = Driver(cfg, FakeDecoder(words))
    d.events([SpeechStart(0.0)], 0.0)
    for t, evs in audio_events(0.0, 1.4):
        d.events(evs, t)
    d.events([], 1.5)  # the segmenter holds silence back: the window's audio stopped growing
    assert [r.kind for r in d.requests][-1] == "final"
    first_final = d.requests[-1]
    assert first_final.end == pytest.approx(1.4)
    # speech resumes inside the hang-over: the held silence and new audio come as one chunk
    for t, evs in audio_events(1.4, 3.6):
        d.events(evs, t)
    d.events([], 3.7)
    d.events([SpeechEnd(0.0, 3.6, "silence")], 4.0)
    d.drain()
    finals = d.finals()
    assert [c.text for c in finals] == ["Good morning everyone", "let us begin now"]
    assert finals[0].segment < finals[1].segment
    assert finals[1].start == pytest.approx(1.4)  # the second window starts at the cut
    assert sum(r.kind == "final" for r in d.requests) == 2  # speech end: nothing left to decode


def test_dropped_partial_is_requested_again_and_finals_still_come() -> None:
    words = script("alpha beta gamma delta", 0.0, 0.5)
    cfg = PolicyConfig(partial_interval_s=0.5, pause_final_s=None, agreement=0)
    pol = CaptionPolicy(cfg)
    step = pol.on_event(SpeechStart(0.0))
    reqs: list[DecodeRequest] = []
    for _t, evs in audio_events(0.0, 1.0):
        for ev in evs:
            reqs += pol.on_event(ev).requests  # type: ignore[arg-type]
    assert len(reqs) == 1 and reqs[0].kind == "partial"
    step = pol.on_result(reqs[0], None, 1.0)  # the worker dropped it as stale
    assert [r.kind for r in step.requests] == ["partial"]  # the audio since is due again
    step2 = pol.on_event(SpeechEnd(0.0, 1.0, "silence"))
    final = step2.requests[0]
    caps = pol.on_result(final, FakeDecoder(words)(final), 1.3).captions
    assert [c.text for c in caps] == ["Alpha beta"]
    assert pol.on_result(step.requests[0], None, 1.4).captions == []  # late partial: ignored


def test_split_utterance_is_cut_and_resent_audio_not_captioned_twice() -> None:
    words = script("first part here", 0.0, 0.5) + script("second part", 1.5, 0.5)
    cfg = PolicyConfig(partial_interval_s=10.0, pause_final_s=None, agreement=0)
    d = Driver(cfg, FakeDecoder(words))
    d.events([SpeechStart(0.0)], 0.0)
    for t, evs in audio_events(0.0, 2.5):
        d.events(evs, t)
    # max_length split at 1.5 s: audio after it comes again as the next utterance
    d.events([SpeechEnd(0.0, 1.5, "max_length"), SpeechStart(1.5)], 2.5)
    d.events([SpeechAudio(np.zeros(SR, np.float32), 1.5, 2.5)], 2.5)
    d.events([SpeechEnd(1.5, 2.5, "silence")], 3.0)
    d.drain()
    finals = [r for r in d.requests if r.kind == "final"]
    assert [(r.start, r.end) for r in finals] == [(0.0, 1.5), (1.5, 2.5)]
    assert [c.text for c in d.finals()] == ["First part here", "second part"]


def test_split_before_the_open_window_keeps_it() -> None:
    """The segmenter splits a long utterance in a pause the policy already finalised: the open
    window's audio comes again as the next utterance; the window carries on, no flicker."""
    words = script("first part", 0.0, 0.5) + script("second part goes on", 1.5, 0.5)
    cfg = PolicyConfig(partial_interval_s=0.5, agreement=0)
    d = Driver(cfg, FakeDecoder(words))
    d.events([SpeechStart(0.0)], 0.0)
    for t, evs in audio_events(0.0, 1.0):
        d.events(evs, t)
    d.events([], 1.3)  # pause: window 1 closed at 1.0
    # speech resumes at 1.4: the held silence comes with it in one piece
    d.events([SpeechAudio(np.zeros(round(0.5 * SR), np.float32), 1.0, 1.5)], 1.5)
    for t, evs in audio_events(1.5, 3.0):
        d.events(evs, t)
    shown = [c for _, c in d.captions if c.type == "partial" and c.start >= 1.0]
    assert shown
    # split at 1.2 (inside the finalised pause), then the audio from 1.2 comes again
    d.events([SpeechEnd(0.0, 1.2, "max_length"), SpeechStart(1.2)], 3.0)
    d.events([SpeechAudio(np.zeros(round(1.8 * SR), np.float32), 1.2, 3.0)], 3.0)
    for t, evs in audio_events(3.0, 3.5):
        d.events(evs, t)
    d.events([SpeechEnd(1.2, 3.5, "silence")], 4.0)
    d.drain()
    finals = d.finals()
    assert [c.text for c in finals] == ["First part", "second part goes on"]
    assert finals[1].start == pytest.approx(1.0) and finals[1].segment == shown[0].segment
    finals_req = [r for r in d.requests if r.kind == "final"]
    assert [(r.start, round(r.end, 3)) for r in finals_req] == [(0.0, 1.0), (1.0, 3.5)]


def test_no_caption_from_silence_and_empty_final_clears_a_shown_partial() -> None:
    cfg = PolicyConfig(partial_interval_s=0.5, pause_final_s=None, agreement=0)
    pol = CaptionPolicy(cfg)
    pol.on_event(SpeechStart(0.0))
    reqs = pol.on_event(SpeechAudio(np.zeros(SR, np.float32), 0.0, 1.0)).requests
    shown = pol.on_result(reqs[0], result("uh huh", no_speech=0.05), 1.1).captions
    assert [c.type for c in shown] == ["partial"]
    final = pol.on_event(SpeechEnd(0.0, 1.0, "silence")).requests[0]
    caps = pol.on_result(final, result("Thank you.", no_speech=0.5), 1.5).captions
    assert [(c.type, c.text, c.segment) for c in caps] == [("final", "", shown[0].segment)]
    # pure noise: nothing shown, nothing emitted
    pol.on_event(SpeechStart(2.0))
    pol.on_event(SpeechAudio(np.zeros(SR // 5, np.float32), 2.0, 2.2))
    final = pol.on_event(SpeechEnd(2.0, 2.2, "silence")).requests[0]
    assert pol.on_result(final, result("you", no_speech=0.9, logprob=-1.5), 3.0).captions == []
    assert pol.committed_text == ""


def test_repetition_loop_in_a_final_is_cut_to_one_copy() -> None:
    cfg = PolicyConfig(partial_interval_s=5.0, pause_final_s=None, agreement=0)
    pol = CaptionPolicy(cfg)
    pol.on_event(SpeechStart(0.0))
    pol.on_event(SpeechAudio(np.zeros(SR, np.float32), 0.0, 1.0))
    final = pol.on_event(SpeechEnd(0.0, 1.0, "silence")).requests[0]
    looped = result("I said no no no no no no no", stopped_by="loop")
    assert [c.text for c in pol.on_result(final, looped, 1.5).captions] == ["I said no"]
    pol.on_event(SpeechStart(2.0))
    pol.on_event(SpeechAudio(np.zeros(SR, np.float32), 2.0, 3.0))
    final = pol.on_event(SpeechEnd(2.0, 3.0, "silence")).requests[0]
    four = result("Nihonu, Nihonu, Nihonu, Nihonu,")  # under the decoder's loop guard
    assert [c.text for c in pol.on_result(final, four, 3.5).captions] == ["Nihonu,"]


def test_prompt_is_the_end_of_the_committed_text() -> None:
    cfg = PolicyConfig(
        prompt_chars=12, prompt_scope="stream", pause_final_s=None, agreement=0,
        partial_interval_s=9,
    )  # fmt: skip
    pol = CaptionPolicy(cfg)
    pol.on_event(SpeechStart(0.0))
    pol.on_event(SpeechAudio(np.zeros(SR, np.float32), 0.0, 1.0))
    final = pol.on_event(SpeechEnd(0.0, 1.0, "silence")).requests[0]
    assert pol.prepare(final).prompt == ""
    pol.on_result(final, result("Hello there my friends."), 1.5)
    assert pol.prompt_text() == "my friends."  # whole words only
    assert replace(cfg, prompt_chars=0).prompt_chars == 0


# --------------------------------------------------------------------------- hours of audio


def test_an_hour_of_speech_invariants() -> None:
    """Random utterances and pauses for an hour, partial errors included: every word ends up
    in exactly one final, in order; committed text never changes; seq increases by one."""
    rng = random.Random(7)
    words: list[Word] = []
    spans: list[tuple[float, float]] = []
    t = 1.0
    n = 0
    while t < 3600.0:
        count = rng.randint(1, 30)
        start = t
        for _ in range(count):
            dur = rng.uniform(0.2, 0.6)
            ending = "." if rng.random() < 0.15 else ""
            words.append(Word(f"w{n}{ending}", t, t + dur))
            n += 1
            t += dur
        spans.append((start, t))
        t += rng.uniform(0.7, 4.0)
    d = Driver(PolicyConfig(), FakeDecoder(words, wobble=0.3, seed=3), cost=0.15)
    for a, b in spans:
        utterance(d, a, b)
    d.drain()
    finals = d.finals()
    assert norm_text(" ".join(c.text for c in finals)) == norm_text(" ".join(w.text for w in words))
    assert [c.seq for _, c in d.captions] == list(range(1, len(d.captions) + 1))
    final_segments = [c.segment for c in finals]
    assert final_segments == sorted(final_segments) and len(set(final_segments)) == len(finals)
    after: dict[int, str] = {}  # segment -> all final text from that segment on
    total = ""
    for c in reversed(finals):
        total = norm_text(c.text + " " + total)
        after[c.segment] = total
    for _, p in d.captions:
        assert p.latency_ms >= 0
        if p.type == "partial" and p.committed_chars:
            assert after[p.segment].startswith(norm_text(p.text[: p.committed_chars]))
    final_seq = {c.segment: c.seq for c in finals}
    assert all(p.seq < final_seq.get(p.segment, 10**9) for p in d.partials())  # final is last


def test_live_and_offline_share_one_guard() -> None:
    from streamcap.runtime.transcribe import TranscribeOptions

    assert TranscribeOptions().guard == PolicyConfig().guard
    # A decode with no tokens (no log-probability) and a high no-speech probability is dropped
    # by the one rule, a confident one kept, whichever path asks.
    guard = PolicyConfig().guard
    assert is_hallucination(result("", no_speech=0.9, logprob=None), guard)
    assert not is_hallucination(result("Hello there.", no_speech=0.1, logprob=-0.2), guard)


def test_abbreviations_and_numbers_do_not_end_sentences() -> None:
    from streamcap.core.text import ends_sentence

    assert ends_sentence("dog.") and ends_sentence("why?") and ends_sentence('end."')
    for word in ("Mr.", "Mrs.", "Dr.", "e.g.", "i.e.", "J.", "vs.", "No."):
        assert not ends_sentence(word) and not ends_sentence(word, "John"), word
    # a number or an ambiguous abbreviation: only when the next word starts a sentence
    assert not ends_sentence("3.") and ends_sentence("3.", "Then")
    assert not ends_sentence("U.S.", "troops") and ends_sentence("U.S.", "The")
    assert not ends_sentence("etc.") and ends_sentence("etc.", "And")


def test_a_title_before_a_name_is_not_committed_as_a_sentence() -> None:
    # "And Mr." / "John Dashwood had then leisure ..." came out as two finals
    text = "And Mr. John Dashwood had then leisure to consider how much there might be"
    words = script(text, 0.0, 0.4)
    d = Driver(PolicyConfig(partial_interval_s=1.0, pause_final_s=None), FakeDecoder(words))
    utterance(d, 0.0, 6.0)
    d.drain()
    assert [c.text for c in d.finals()] == [text]


def test_a_commit_cuts_the_window_at_the_committed_words_end() -> None:
    # two sentences in one utterance, with a short breath between them: the first is
    # committed from partials, and the rest is decoded on its own audio after it as prompt
    words = script("we will start now.", 0.0, 0.4) + script("the agenda has three items", 1.8)
    cfg = PolicyConfig(partial_interval_s=0.5, pause_final_s=None, prompt_chars=200)
    d = Driver(cfg, FakeDecoder(words, timed=True))
    utterance(d, 0.0, 4.2)
    d.drain()
    finals = d.finals()
    assert [c.text for c in finals] == ["We will start now.", "The agenda has three items"]
    assert finals[0].end == pytest.approx(1.6)  # the committed words' end, not a partial's
    assert [w.word for w in finals[0].words] == finals[0].text.split()
    assert finals[0].words[-1].end == pytest.approx(1.6)
    later = [r for r in d.requests if r.id > d.requests[0].id and r.start > 0.0]
    assert later and all(1.6 <= r.start <= 1.8 for r in later)  # cut in the silence
    final = [r for r in d.requests if r.kind == "final"][-1]
    assert final.start == later[0].start
    assert d.prompts[final.id] == "We will start now."
    assert finals[1].start == pytest.approx(final.start)
    assert [w.start for w in finals[1].words] == pytest.approx([1.8, 2.2, 2.6, 3.0, 3.4])
    # finals are always timed; a partial only when the one before it may lead to a commit
    assert all(r.words for r in d.requests if r.kind == "final")
    timed = [r.words for r in d.requests if r.kind == "partial"]
    assert any(timed) and not all(timed)


def test_without_word_times_a_commit_keeps_the_window() -> None:
    words = script("we will start now.", 0.0, 0.4) + script("the agenda has three items", 1.8)
    cfg = PolicyConfig(partial_interval_s=0.5, pause_final_s=None)
    d = Driver(cfg, FakeDecoder(words, timed=False))
    utterance(d, 0.0, 4.2)
    d.drain()
    assert [c.text for c in d.finals()] == ["We will start now.", "The agenda has three items"]
    assert all(r.start == 0.0 for r in d.requests)


def test_an_hour_of_speech_with_cuts_at_commits() -> None:
    """The hour of random speech again, with word times: every word in exactly one final."""
    rng = random.Random(11)
    words: list[Word] = []
    spans: list[tuple[float, float]] = []
    t, n = 1.0, 0
    while t < 3600.0:
        start = t
        for _ in range(rng.randint(1, 40)):
            dur = rng.uniform(0.2, 0.6)
            words.append(Word(f"w{n}" + ("." if rng.random() < 0.15 else ""), t, t + dur))
            n += 1
            t += dur + (rng.uniform(0.0, 0.3) if rng.random() < 0.3 else 0.0)
        spans.append((start, t))
        t += rng.uniform(0.7, 4.0)
    d = Driver(PolicyConfig(prompt_chars=100), FakeDecoder(words, 0.3, 5, timed=True), 0.15)
    for a, b in spans:
        utterance(d, a, b)
    d.drain()
    finals = d.finals()
    assert norm_text(" ".join(c.text for c in finals)) == norm_text(" ".join(w.text for w in words))
    assert sum(r.start > a + 1e-6 for r in d.requests for a, _ in spans[:1]) > 0
    timed = [w for c in finals for w in c.words]
    assert [w.start for w in timed] == sorted(w.start for w in timed)


def test_a_continuation_is_prompted_with_its_utterance_only() -> None:
    # a pause closes the window, speech resumes within the utterance: the rest is decoded
    # after what was said before the pause; the next utterance starts without a prompt
    words = script("please enter a new extension", 0.0, 0.4) + script("followed by pound", 2.4)
    words += script("goodbye now", 6.0)
    cfg = PolicyConfig(partial_interval_s=1.0, prompt_chars=100, agreement=0)
    d = Driver(cfg, FakeDecoder(words, timed=True))
    d.events([SpeechStart(0.0)], 0.0)
    for t, evs in audio_events(0.0, 2.0):
        d.events(evs, t)
    d.events([], 2.2)  # a pause the segmenter holds back: the window closes
    for t, evs in audio_events(2.0, 3.6):
        d.events(evs, t)
    d.events([], 3.8)
    d.events([SpeechEnd(0.0, 3.6, "silence")], 4.2)
    utterance(d, 6.0, 6.8)
    d.drain()
    assert [c.text for c in d.finals()] == [
        "Please enter a new extension", "followed by pound", "goodbye now",
    ]  # fmt: skip
    by_window = {}
    for r in d.requests:
        by_window.setdefault(r.window, []).append(d.prompts[r.id])
    prompts = list(by_window.values())
    assert set(prompts[0]) == {""}
    assert set(prompts[1]) == {"Please enter a new extension"}
    assert set(prompts[2]) == {""}


def test_a_short_replys_final_is_prompted_with_the_sentence_before() -> None:
    # issue 20: one or two words heard without context come out wrong ("yesterday" as
    # "Yes, today."); with `short_prompt_s` the final of a short window is decoded after the
    # stream's previous finals; its partials, and long windows, are not prompted
    words = script("we moved the meeting to next week", 0.0) + script("yesterday", 5.0)
    words += script("and the budget review is still on for friday", 7.0)
    cfg = PolicyConfig(partial_interval_s=1.0, short_prompt_s=1.5, short_prompt_chars=20)
    d = Driver(cfg, FakeDecoder(words, timed=True))
    utterance(d, 0.0, 2.8)
    utterance(d, 5.0, 5.4)
    utterance(d, 7.0, 10.6)
    d.drain()
    assert [c.text for c in d.finals()][1] == "yesterday"
    prompted = {
        (r.window, r.kind): d.prompts[r.id] for r in d.requests if d.prompts[r.id]
    }  # fmt: skip
    assert list(prompted.values()) == ["meeting to next week"]  # the last 20 chars, whole words
    ((window, kind),) = prompted
    assert kind == "final" and window == d.requests[-1].window - 1
    off = Driver(PolicyConfig(partial_interval_s=1.0), FakeDecoder(words, timed=True))
    utterance(off, 0.0, 2.8)
    utterance(off, 5.0, 5.4)
    off.drain()
    assert not any(off.prompts.values())  # off by default


def test_keep_form_and_cut_after_rules() -> None:
    from streamcap.core.cuts import cut_after, timings_for
    from streamcap.core.display import keep_form

    shown = ["and", "So,", "my", "friend"]
    assert keep_form(shown, ["And", "so", "my", "friend.", "Bye"]) == [
        "and", "So,", "my", "friend.", "Bye",
    ]  # fmt: skip
    assert keep_form(shown, ["and", "no", "my"]) == ["and", "no", "my"]  # a new word: new form
    # a stop added before a word: the word takes its new capital ("folders. Press 3")
    assert keep_form(["folders", "press", "3"], ["folders.", "Press", "3"]) == [
        "folders.", "Press", "3",
    ]  # fmt: skip
    t = [WordTiming(" a", 0.0, 0.4, 1.0), WordTiming(" b", 1.0, 1.3, 1.0)]
    assert cut_after(t, 1, 2.0) == pytest.approx(0.6)  # into the silence, at most 0.2 s
    assert cut_after([t[0], WordTiming(" b", 0.5, 0.9, 1.0)], 1, 2.0) == pytest.approx(0.45)
    assert cut_after(t, 2, 1.4) == pytest.approx(1.35)  # the last word: towards the end
    r = replace(result("a b"), words=tuple(t))
    assert timings_for(r, ["a", "b"]) == t and timings_for(r, ["a", "c"]) is None
    assert timings_for(result("a b"), ["a"]) is None  # not aligned


# --------------------------------------------------------------------------- early finals


def chunk(t0: float, t1: float, silent: float = 0.0) -> SpeechAudio:
    """Audio from t0 to t1 whose last `silent` seconds are unvoiced (as the segmenter says)."""
    return SpeechAudio(np.zeros(round((t1 - t0) * SR), np.float32), t0, t1, silent)


@pytest.mark.parametrize("cost", [0.05, 0.3])  # the early final is done before / after the pause
def test_an_early_final_at_pause_onset_is_the_windows_final(cost: float) -> None:
    words = script("good morning everyone", 0.0, 0.4)
    cfg = PolicyConfig(partial_interval_s=0.5, pause_final_s=0.0, agreement=0, early_final_s=0.12)
    d = Driver(cfg, FakeDecoder(words), cost=cost)
    d.events([SpeechStart(0.0)], 0.0)
    for t, evs in audio_events(0.0, 1.2):
        d.events(evs, t)
    n_before = len(d.requests)
    d.events([chunk(1.2, 1.35, silent=0.15)], 1.35)  # a pause begins: its final starts now
    early = d.requests[-1]
    assert len(d.requests) == n_before + 1 and early.kind == "final"
    assert early.end == pytest.approx(1.35)
    d.events([chunk(1.35, 1.41, silent=0.06)], 1.41)  # the rest of the segmenter's tail
    d.events([], 1.5)  # the pause is confirmed
    d.events([SpeechEnd(0.0, 1.41, "silence")], 1.8)
    d.drain()
    assert [r for r in d.requests[n_before:]] == [early]  # no partial, no second final
    finals = d.finals()
    assert [c.text for c in finals] == ["Good morning everyone"]
    assert finals[0].end == pytest.approx(1.35)  # the window was cut where its decode ended
    assert d.policy.early_finals == {"started": 1, "used": 1, "voided": 0}


def test_speech_resuming_voids_the_early_final_and_the_window_goes_on() -> None:
    words = script("good morning", 0.0, 0.4) + script("everyone here", 1.0, 0.4)
    cfg = PolicyConfig(partial_interval_s=0.5, pause_final_s=0.0, agreement=0, early_final_s=0.12)
    d = Driver(cfg, FakeDecoder(words), cost=0.05)
    d.events([SpeechStart(0.0)], 0.0)
    for t, evs in audio_events(0.0, 0.8):
        d.events(evs, t)
    d.events([chunk(0.8, 0.95, silent=0.15)], 0.95)
    first = d.requests[-1]
    assert first.kind == "final" and first.end == pytest.approx(0.95)
    d.events([chunk(0.95, 1.1)], 1.1)  # voice again: only a breath
    for t, evs in audio_events(1.1, 1.8):
        d.events(evs, t)
    d.events([chunk(1.8, 1.95, silent=0.15)], 1.95)
    d.events([], 2.05)
    d.events([SpeechEnd(0.0, 1.95, "silence")], 2.4)
    d.drain()
    assert [c.text for c in d.finals()] == ["Good morning everyone here"]  # one window
    assert d.finals()[0].end == pytest.approx(1.95)
    assert d.policy.early_finals == {"started": 2, "used": 1, "voided": 1}
    assert any(r.kind == "partial" and r.start < 1.0 < r.end for r in d.requests)  # went on


def test_without_early_finals_the_pause_is_confirmed_first() -> None:
    words = script("good morning everyone", 0.0, 0.4)
    cfg = PolicyConfig(partial_interval_s=0.5, pause_final_s=0.0, agreement=0, early_final_s=None)
    d = Driver(cfg, FakeDecoder(words))
    d.events([SpeechStart(0.0)], 0.0)
    for t, evs in audio_events(0.0, 1.2):
        d.events(evs, t)
    d.events([chunk(1.2, 1.41, silent=0.21)], 1.41)
    assert all(r.end <= 1.2 + 1e-9 for r in d.requests)  # nothing started in the pause yet
    d.events([], 1.5)
    d.drain()
    assert [c.text for c in d.finals()] == ["Good morning everyone"]
    assert d.finals()[0].end == pytest.approx(1.41)
    assert d.policy.early_finals["started"] == 0


def test_a_commit_while_an_early_final_waits_voids_it() -> None:
    """A partial still running when the pause began locks a sentence and cuts the window: the
    early final (of audio from before the cut) must not send the committed words again."""
    words = script("hello there. how", 0.0, 0.4)
    cfg = PolicyConfig(partial_interval_s=0.3, pause_final_s=0.0, early_final_s=0.12)
    decode = FakeDecoder(words, timed=True)
    d = Driver(cfg, decode, cost=0.05)
    d.events([SpeechStart(0.0)], 0.0)
    for t, evs in audio_events(0.0, 1.1):
        d.events(evs, t)
    d.drain()
    pol, log = d.policy, d.log
    captions = [c for _, c in d.captions if c.type == "final"]
    [partial] = pol.on_event(chunk(1.1, 1.2)).requests  # still running when the pause begins
    assert partial.kind == "partial"
    step = pol.on_event(chunk(1.2, 1.35, silent=0.15))
    step.extend(pol.on_tick(1.35))
    [early] = [r for r in step.requests if r.kind == "final"]
    step = pol.on_result(partial, decode(partial), 1.45)  # locks and commits "hello there."
    captions += [log.add(c) for c in step.captions]
    assert pol.early_finals["voided"] == 1
    step = pol.on_result(early, decode(early), 1.5)  # stale: ignored
    step.extend(pol.on_tick(1.6))  # the pause holds: the rest of the window is decoded
    captions += [log.add(c) for c in step.captions]
    for r in step.requests:
        if r.kind == "final":
            captions += [log.add(c) for c in pol.on_result(r, decode(r), 1.8).captions]
    text = " ".join(c.text for c in captions if c.type == "final")
    assert norm_text(text).replace("~", "").split() == ["hello", "there", "how"], captions
