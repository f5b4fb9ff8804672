"""The caption policy's commits: sentence ends (not after abbreviations, numbers, titles), the
window cut at the committed words, prompts scoped to the utterance, the screen's word forms.
Driven without a model (`policy_driver`).
"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from policy_driver import Driver, FakeDecoder, Word, audio_events, result, script, utterance

from streamcap.core.decode_types import WordTiming
from streamcap.core.policy_config import PolicyConfig
from streamcap.core.segmenter import SpeechEnd, SpeechStart
from streamcap.core.text import norm_text


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
