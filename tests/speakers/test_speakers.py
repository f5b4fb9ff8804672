"""Speaker labels from the voice: the voice encoder on real speech, the pure clustering and
split rules on synthetic embeddings, and the labelling stage on a real two-voice recording
(through `LiveStream` with the bundled Whisper base model on the simulated clock).

The voice encoder's golden values below come from resemblyzer 0.1.4 itself (with librosa
0.11, ``pad_mode="reflect"``), run once outside the test environment, which has neither.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from voicekit import two_voices

from streamcap.core.captions import CaptionEvent, CaptionLog
from streamcap.core.decode_types import WordTiming
from streamcap.core.speaker_changes import change_point
from streamcap.core.speakers import (
    Decision,
    SpeakerConfig,
    SpeakerTracker,
    label_name,
    mean_embedding,
    unit,
)

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
SR = 16000
MANIFEST = {
    json.loads(line)["id"]: json.loads(line)
    for line in (DATA / "manifest.jsonl").read_text().splitlines()
    if line.strip()
}
#: JFK's clip has a 1 s pause at 4.4-5.35 s ("... ask not | what your country ..."):
#: the two halves are two utterances of one speaker.
JFK_CUT_S = 4.9


@pytest.fixture(scope="module")
def encoder():  # type: ignore[no-untyped-def]
    from streamcap.speakers.voice_encoder import VoiceEncoder

    return VoiceEncoder()


def clip(speech: dict[str, Any], name: str) -> np.ndarray:
    return np.asarray(speech[name], dtype=np.float32)


# --------------------------------------------------------------------------- features


def test_mel_filterbank_and_spectrogram_match_librosa() -> None:
    from streamcap.speakers.voice_encoder import mel_filterbank, mel_spectrogram

    fb = mel_filterbank()
    assert fb.shape == (40, 201)
    sums = fb.sum(axis=1)[[0, 10, 20, 39]]
    np.testing.assert_allclose(sums, [0.024809, 0.024809, 0.0252198, 0.0249788], rtol=1e-4)
    t = np.arange(SR) / SR
    x = (0.1 * np.sin(2 * np.pi * 440 * t) + 0.05 * np.sin(2 * np.pi * 3000 * t)).astype(np.float32)
    m = mel_spectrogram(x)
    assert m.shape == (101, 40) and m.dtype == np.float32  # centred frames: 1 + n // hop
    bands = [5, 4, 6, 27]
    np.testing.assert_allclose(m[50, bands], [1.64311, 0.21757, 0.178192, 0.148187], rtol=1e-4)
    # the edges: reflect padding (librosa's default when the model was trained)
    np.testing.assert_allclose(m[0, bands], [0.505735, 0.639398, 0.467902, 0.106457], rtol=1e-4)
    np.testing.assert_allclose(m[100, bands], [0.554316, 0.703147, 0.395524, 0.143558],
                               rtol=1e-4)  # fmt: skip


def test_partial_slices_as_resemblyzer() -> None:
    from streamcap.speakers.voice_encoder import partial_slices

    assert partial_slices(SR // 2) == [(0, 160)]  # shorter than a window: one, padded
    s = partial_slices(5 * SR)  # 1.3 windows a second: a step of 77 frames
    assert s[0] == (0, 160) and s[1] == (77, 237) and all(b - a == 160 for a, b in s)
    assert s[-1][0] * 160 < 5 * SR


# --------------------------------------------------------------------------- encoder


@pytest.mark.model
def test_embedding_equals_resemblyzers(speech, encoder) -> None:  # type: ignore[no-untyped-def]
    e = encoder.embed(clip(speech, "en_real_praatio_mary"))
    assert e.shape == (256,) and abs(float(np.linalg.norm(e)) - 1.0) < 1e-5
    top = [9, 243, 58, 209, 187, 16]  # resemblyzer's largest dimensions, in order
    assert list(np.argsort(-e)[:6]) == top
    np.testing.assert_allclose(e[top], [0.29681, 0.26979, 0.25859, 0.22327, 0.2133, 0.21122],
                               atol=2e-4)  # fmt: skip


@pytest.mark.model
def test_same_speaker_is_closer_than_other_speakers(speech, encoder) -> None:  # type: ignore[no-untyped-def]
    ids = ["en_real_librivox_0870", "en_real_librivox_0880", "en_real_jfk",
           "en_real_praatio_mary", "en_real_forever", "en_real_goforward",
           "en_tts_piper_joe_s07"]  # fmt: skip
    assert MANIFEST[ids[0]]["speaker"] == MANIFEST[ids[1]]["speaker"]
    assert len({MANIFEST[i]["speaker"] for i in ids[1:]}) == len(ids) - 1
    emb = encoder.embed_many([clip(speech, i) for i in ids])
    sims = emb @ emb.T
    same = sims[0, 1]
    others = [sims[a, b] for a in (0, 1) for b in range(2, len(ids))]
    assert same > max(others) + 0.05, (same, max(others))
    assert same >= SpeakerConfig().match_threshold  # the same reader is one label
    # one batch equals one by one
    np.testing.assert_allclose(emb[2], encoder.embed(clip(speech, "en_real_jfk")), atol=1e-5)


@pytest.mark.model
def test_partial_windows_along_a_clip(speech, encoder) -> None:  # type: ignore[no-untyped-def]
    x = clip(speech, "en_real_librivox_0870")  # 7.1 s
    starts, emb = encoder.embed_partials(x, hop_s=0.4)
    assert emb.shape == (len(starts), 256)
    np.testing.assert_allclose(np.diff(starts), 0.4)
    assert starts[0] == 0.0 and starts[-1] + 1.6 * 0.75 <= 7.1 + 1e-9  # 75 % coverage
    np.testing.assert_allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-5)
    short_starts, short = encoder.embed_partials(x[: SR // 2])
    assert len(short_starts) == 1 and short.shape == (1, 256)


def test_weights_load_without_importing_resemblyzer_or_librosa() -> None:
    code = (
        "import sys; from streamcap.speakers.voice_encoder import VoiceEncoder, weights_path; "
        "VoiceEncoder(); assert weights_path().name == 'pretrained.pt'; "
        "bad = [m for m in ('resemblyzer', 'librosa', 'webrtcvad') if m in sys.modules]; "
        "assert not bad, bad"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, cwd=ROOT)  # fmt: skip
    assert run.returncode == 0, run.stderr


# --------------------------------------------------------------------------- clustering


def voices(n: int, seed: int = 0) -> np.ndarray:
    """``n`` speaker directions, pairwise similarity 0.5-0.65 as different real voices have
    (non-negative, like the encoder's ReLU outputs): a shared part plus a voice's own."""
    rng = np.random.default_rng(seed)
    shared = unit(rng.random(256))
    return np.stack([unit(0.3 * shared + unit(rng.random(256) ** 4)) for _ in range(n)])


def utterance(voice: np.ndarray, rng: np.random.Generator, noise: float = 0.35) -> np.ndarray:
    return unit(np.maximum(0.0, voice + noise * rng.standard_normal(256) / 16))


def test_synthetic_voices_are_apart_and_utterances_near_their_voice() -> None:
    v = voices(4)
    rng = np.random.default_rng(1)
    cross = [float(v[a] @ v[b]) for a in range(4) for b in range(a)]
    near = [float(utterance(v[0], rng) @ v[0]) for _ in range(20)]
    assert max(cross) < 0.7 and min(near) > 0.9  # the regime the thresholds are for


def test_online_clustering_gives_each_voice_one_lasting_label() -> None:
    v = voices(4)
    rng = np.random.default_rng(2)
    tracker = SpeakerTracker()
    order = [0, 1, 0, 2, 3, 1, 1, 2, 0, 3, 3, 2, 0, 1] * 3
    got = [tracker.assign(utterance(v[k], rng), speech_s=2.5).speaker for k in order]
    mapping = {k: {g for o, g in zip(order, got, strict=True) if o == k} for k in range(4)}
    assert all(len(s) == 1 for s in mapping.values()), mapping
    assert len({next(iter(s)) for s in mapping.values()}) == 4 == len(tracker)
    assert [label_name(i) for i in range(2)] == ["Speaker 1", "Speaker 2"]
    assert got[0] == 0 and got[1] == 1  # labels in order of appearance


def test_short_finals_never_found_a_speaker() -> None:
    v = voices(3)
    rng = np.random.default_rng(3)
    cfg = SpeakerConfig()
    tracker = SpeakerTracker(cfg)
    assert tracker.assign(utterance(v[0], rng), 0.5).speaker is None  # nobody yet: no label
    tracker.assign(utterance(v[0], rng), 3.0)
    # a new voice, but too little speech to found a speaker: the nearest one
    d = tracker.assign(utterance(v[1], rng), cfg.new_speaker_s - 0.1)
    assert d.speaker == 0 and not d.new and len(tracker) == 1
    d = tracker.assign(utterance(v[1], rng), cfg.new_speaker_s + 0.5)
    assert d.new and d.speaker == 1
    for rule, want in (("previous", 1), ("nearest", 0), ("none", None)):
        t = SpeakerTracker(SpeakerConfig(short=rule))  # type: ignore[arg-type]
        for k in (0, 1):
            t.assign(utterance(v[k], rng), 3.0)
        assert t.assign(utterance(v[0], rng), cfg.min_embed_s / 2).speaker == want, rule


def test_threshold_rises_with_speech_and_bounds_the_speakers() -> None:
    cfg = SpeakerConfig()
    t = SpeakerTracker(cfg)
    assert t.threshold(cfg.new_speaker_s) == pytest.approx(cfg.short_match_threshold)
    assert t.threshold(cfg.match_long_s + 5) == pytest.approx(cfg.match_threshold)
    mid = t.threshold((cfg.new_speaker_s + cfg.match_long_s) / 2)
    assert cfg.short_match_threshold < mid < cfg.match_threshold
    v = voices(5)
    rng = np.random.default_rng(4)
    small = SpeakerTracker(SpeakerConfig(max_speakers=3))
    for k in range(5):
        small.assign(utterance(v[k], rng), 3.0)
    assert len(small) == 3


def test_doubtful_assignments_leave_the_centroid_alone() -> None:
    v = voices(2)
    rng = np.random.default_rng(5)
    t = SpeakerTracker(SpeakerConfig(max_speakers=1))
    t.assign(utterance(v[0], rng), 3.0)
    before = t.centroids().copy()
    d = t.assign(utterance(v[1], rng), 3.0)  # forced onto speaker 0, far from it
    assert d.speaker == 0 and d.similarity < t.config.update_threshold
    np.testing.assert_array_equal(t.centroids(), before)
    t.assign(utterance(v[0], rng), 3.0)  # a confident one moves it
    assert not np.array_equal(t.centroids(), before)


def test_decide_changes_nothing_until_commit() -> None:
    v = voices(2)
    rng = np.random.default_rng(6)
    t = SpeakerTracker()
    e = utterance(v[0], rng)
    d = t.decide(e, 3.0)
    assert d == Decision(0, 1.0, new=True) and len(t) == 0 and t.previous is None
    t.commit(d, e, 3.0)
    assert len(t) == 1 and t.previous == 0
    assert t.without_audio() == Decision(0, 0.0)
    trial = t.copy()  # what the labeller tries a split on, and drops when it merges back
    trial.assign(utterance(v[1], rng), 3.0)
    trial.assign(utterance(v[0], rng), 3.0)
    assert len(trial) == 2 and len(t) == 1 and t.previous == 0
    assert not np.array_equal(trial.centroids()[:1], t.centroids())


def test_config_is_validated() -> None:
    for bad in ({"match_threshold": 1.5}, {"max_speakers": 0}, {"window_hop_s": 0},
                {"short": "maybe"}):  # fmt: skip
        with pytest.raises(ValueError):
            SpeakerConfig(**bad)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- change points


def timed_words(n: int, start: float, end: float) -> list[WordTiming]:
    d = (end - start) / n
    return [WordTiming(f"w{i}", start + i * d + 0.03, start + (i + 1) * d - 0.03, 0.9)
            for i in range(n)]  # fmt: skip


def windows_over(t0: float, t1: float, change: float | None, a: np.ndarray, b: np.ndarray,
                 rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """1.6 s windows every 0.4 s over [t0, t1]; a window's embedding mixes the two voices in
    proportion to its audio on each side of ``change``."""
    starts = np.arange(t0, max(t0, t1 - 1.6 * 0.75) + 1e-9, 0.4)
    rows = []
    for s in starts:
        f = 0.0 if change is None else float(np.clip((s + 1.6 - change) / 1.6, 0.0, 1.0))
        rows.append(utterance(unit((1 - f) * a + f * b), rng, noise=0.2))
    return starts, np.stack(rows)


def test_change_point_finds_the_word_where_the_voice_changes() -> None:
    v = voices(2)
    rng = np.random.default_rng(7)
    cfg = SpeakerConfig()
    words = timed_words(6, 10.0, 13.0) + timed_words(8, 13.2, 17.0)  # change before word 6
    starts, emb = windows_over(9.9, 17.1, 13.1, v[0], v[1], rng)
    cp = change_point(words, starts, emb, 1.6, cfg)
    assert cp is not None and abs(cp.index - 6) <= 1 and cp.similarity < cfg.split_threshold
    same_starts, same = windows_over(9.9, 17.1, None, v[0], v[1], rng)
    assert change_point(words, same_starts, same, 1.6, cfg) is None
    # a change too near the end leaves no piece long enough: no split
    late = timed_words(12, 10.0, 16.0) + timed_words(2, 16.2, 17.0)
    starts, emb = windows_over(9.9, 17.1, 16.1, v[0], v[1], rng)
    assert change_point(late, starts, emb, 1.6, cfg) is None
    m = mean_embedding(emb, starts < 12)
    assert abs(float(np.linalg.norm(m)) - 1.0) < 1e-5


# --------------------------------------------------------------------------- the stage


@pytest.mark.model
def test_labeller_splits_a_final_where_the_voice_changes(speech, encoder) -> None:  # type: ignore[no-untyped-def]
    from streamcap.runtime.labeller import SpeakerLabeller

    reader = clip(speech, "en_real_librivox_0870")  # 7.1 s
    jfk = clip(speech, "en_real_jfk")[int(JFK_CUT_S * SR) :]  # 6.1 s
    audio = np.concatenate([reader, jfk])
    t_change = len(reader) / SR
    words = timed_words(21, 0.3, t_change - 0.2) + timed_words(15, t_change + 0.4, 10.7)
    stage = SpeakerLabeller(encoder)
    for i in range(0, len(audio), 1600):  # fed as a stream is, in chunks
        stage.feed(audio[i : i + 1600])
    text = " ".join(w.word for w in words)
    partial = CaptionEvent("partial", 1, "w0 w1", 0.0, 2.0)
    final = CaptionEvent("final", 1, text, 0.0, 11.0, len(text), 100.0, tuple(words))
    assert stage.process(partial) == [partial]  # partials pass through, no speaker
    out = stage.process(final)
    assert len(out) == 2, stage.records
    first, second = out
    assert [e.segment for e in out] == [1, 2]
    assert first.speaker == "Speaker 1" and second.speaker == "Speaker 2"
    assert abs(len(first.words) - 21) <= 1 and len(first.words) + len(second.words) == 36
    assert first.text == " ".join(w.word for w in first.words)
    assert first.start == 0.0 and second.end == 11.0 and first.end == second.start
    assert first.words[-1].end <= first.end <= second.words[0].start
    assert first.committed_chars == len(first.text)
    assert first.latency_ms > final.latency_ms == second.latency_ms  # its end came earlier
    # every later event moves one segment on: the split added one
    later = stage.process(CaptionEvent("partial", 2, "next", 11.0, 12.0))
    assert later[0].segment == 3
    # an empty final (it clears a partial) passes through unlabelled
    assert stage.process(CaptionEvent("final", 2, "", 11.0, 12.0))[0].speaker == ""
    assert stage.records[-1].embed_ms > 0


@pytest.mark.model
def test_labeller_gives_each_voice_its_label_in_a_live_stream(speech, engine, encoder) -> None:  # type: ignore[no-untyped-def]
    from streamcap.core.live_config import LiveConfig
    from streamcap.runtime.clock import SimulatedClock
    from streamcap.runtime.labeller import SpeakerLabeller
    from streamcap.runtime.replay import replay
    from streamcap.runtime.stream import LiveStream
    from streamcap.runtime.worker import InferenceWorker

    audio, spans = two_voices(speech)
    clock = SimulatedClock()
    stage = SpeakerLabeller(encoder, clock=clock)
    stream = LiveStream("room", InferenceWorker(engine), None, LiveConfig(language="en"), clock,
                        stage=stage)  # fmt: skip
    sink = CaptionLog("room")
    events = []
    stream.on_caption = lambda ev: events.append(sink.add(ev))
    replay(stream, audio)
    assert not stream.errors
    finals = [c for c in events if c.type == "final" and c.text]
    assert len(finals) >= 4
    by_voice: dict[str, set[str]] = {"reader": set(), "jfk": set()}
    for c in finals:  # the voice whose clip overlaps the final most
        overlap = [min(c.end, b) - max(c.start, a) for a, b, _ in spans]
        by_voice[spans[int(np.argmax(overlap))][2]].add(c.speaker)
    assert by_voice["reader"] == {"Speaker 1"}, (by_voice, stage.records)
    assert by_voice["jfk"] == {"Speaker 2"}, (by_voice, stage.records)
    # a partial is named only with its own voice's label, never before its voice has a label
    # (issue 37; how many partials there are depends on the worker keeping up, so naming
    # itself is tests/speakers/test_partial_names.py's)
    label = {"reader": "Speaker 1", "jfk": "Speaker 2"}
    for c in events:
        if c.type == "partial" and c.speaker:
            overlap = [min(c.end, b) - max(c.start, a) for a, b, _ in spans]
            assert c.speaker == label[spans[int(np.argmax(overlap))][2]], (c, stage.partial_records)
    assert all(c.speaker == "" for c in events if c.type == "partial" and c.end < spans[1][1])
    # one sequence, each segment's final after its partials, segments in order
    segs = [c.segment for c in finals]
    assert segs == sorted(segs) and len(set(segs)) == len(segs)
    done: set[int] = set()
    for c in events:
        assert c.segment not in done, "an event after its segment's final"
        if c.type == "final":
            done.add(c.segment)
    assert all(r.embed_ms > 0 for r in stage.records if r.speech_s > 0.3)
