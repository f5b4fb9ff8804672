"""Early finals: the exact final started at a pause's onset, kept when the pause holds, voided
when speech resumes or a commit cuts the window. Driven without a model (`policy_driver`).
"""

from __future__ import annotations

import pytest
from policy_driver import Driver, FakeDecoder, audio_events, chunk, script

from streamcap.core.policy_config import PolicyConfig
from streamcap.core.segmenter import SpeechEnd, SpeechStart
from streamcap.core.text import norm_text


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
