"""Caption policy, driven with synthetic segmenter events and a fake decoder on a fake clock.

The fake decoder stands in for the model (pure logic under test): it "hears" a scripted word
timeline, returns the words a window holds, and for partials garbles the word still being
spoken, as Whisper does with a window cut mid-word.

Here: partials, locking, finals, pauses, splits, the guard, an hour of invariants.
"""

from __future__ import annotations

import random
from dataclasses import replace

import numpy as np
import pytest
from policy_driver import (
    SR,
    Driver,
    FakeDecoder,
    Word,
    audio_events,
    result,
    script,
    utterance,
)

from streamcap.core.captions import Caption
from streamcap.core.policy import CaptionPolicy
from streamcap.core.policy_config import PolicyConfig
from streamcap.core.policy_window import DecodeRequest
from streamcap.core.segmenter import SpeechAudio, SpeechEnd, SpeechStart
from streamcap.core.text import align_prefix, is_hallucination, norm_text, trim_loop, trim_restart

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
