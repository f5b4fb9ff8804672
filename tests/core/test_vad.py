"""Tests for the speech segmenter.

State-machine tests inject a fake VAD (voiced = loud frame) and synthetic audio, so each rule is
checked exactly; real-audio tests run the real webrtcvad on tests/data.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from streamcap.core.constants import SAMPLE_RATE
from streamcap.core.segmenter import (
    Event,
    Segmenter,
    SegmenterConfig,
    SpeechAudio,
    SpeechEnd,
    SpeechStart,
    collect_utterances,
    segment_audio,
)

SR = SAMPLE_RATE
DATA = Path(__file__).resolve().parents[1] / "data"
RNG = np.random.default_rng(1234)


def fake_vad(frame: bytes, sample_rate: int) -> bool:
    """Voiced when the frame peaks above ~0.03 full scale (stands in for webrtcvad)."""
    assert sample_rate == SR
    return int(np.abs(np.frombuffer(frame, dtype="<i2")).max()) >= 1000


def speech(seconds: float, amp: float = 0.3) -> np.ndarray:
    t = np.arange(round(seconds * SR)) / SR
    return (amp * (np.sin(2 * np.pi * 440 * t) + 0.5 * np.sin(2 * np.pi * 1320 * t)) / 1.5).astype(
        np.float32
    )


def silence(seconds: float, amp: float = 1e-4) -> np.ndarray:
    return (RNG.standard_normal(round(seconds * SR)) * amp).astype(np.float32)


def run(audio: np.ndarray, chunk: int | None = None, **cfg: object) -> list[Event]:
    seg = Segmenter(SegmenterConfig(**cfg), vad=fake_vad)  # type: ignore[arg-type]
    if chunk is None:
        return seg.push(audio) + seg.flush()
    events: list[Event] = []
    for i in range(0, len(audio), chunk):
        events += seg.push(audio[i : i + chunk])
    return events + seg.flush()


def bounds(events: list[Event]) -> list[tuple[str, float, float]]:
    return [(e.reason, e.start, e.end) for e in events if isinstance(e, SpeechEnd)]


def check_invariants(events: list[Event], audio: np.ndarray) -> None:
    """Events alternate start/audio/end, and each utterance's audio is the input slice."""
    open_start: float | None = None
    sent = 0
    for e in events:
        if isinstance(e, SpeechStart):
            assert open_start is None
            open_start, sent = e.start, 0
        elif isinstance(e, SpeechAudio):
            assert open_start is not None and len(e.samples) == round((e.end - e.start) * SR)
            assert np.array_equal(e.samples, audio[round(e.start * SR) : round(e.end * SR)])
            assert e.start == pytest.approx(open_start + sent / SR)  # contiguous
            sent += len(e.samples)
        else:
            assert open_start == e.start and e.end > e.start
            if e.reason != "max_length":  # only a split re-sends audio past the end
                assert sent == round((e.end - e.start) * SR)
            open_start = None
    assert open_start is None
    for u in collect_utterances(events):
        assert np.array_equal(u.audio, audio[round(u.start * SR) : round(u.end * SR)])


def test_starts_after_trigger_with_preroll_and_ends_after_hangover() -> None:
    audio = np.concatenate([silence(0.9), speech(1.2), silence(2.1)])  # frame-aligned times
    seg = Segmenter(vad=fake_vad)
    timeline: list[tuple[float, Event]] = []
    for i in range(0, len(audio), 160):  # 10 ms pushes, note the audio time of each event
        timeline += [(seg.time, e) for e in seg.push(audio[i : i + 160])]
    timeline += [(seg.time, e) for e in seg.flush()]
    events = [e for _, e in timeline]
    check_invariants(events, audio)
    assert isinstance(events[0], SpeechStart) and events[0].start == pytest.approx(0.6)  # pre-roll
    first_audio = next(e for e in events if isinstance(e, SpeechAudio))
    assert first_audio.start == pytest.approx(0.6)
    # Announced once min_speech_ms of voice has been heard, not before, not much later.
    assert 0.9 + 0.24 <= timeline[0][0] + 1e-9 <= 0.9 + 0.3
    # The end is the last voice + 210 ms of tail, reported once the 600 ms hang-over has passed.
    assert bounds(events) == [("silence", pytest.approx(0.6), pytest.approx(2.1 + 0.21))]
    t_end = next(t for t, e in timeline if isinstance(e, SpeechEnd))
    assert 2.1 + 0.6 <= t_end + 1e-9 <= 2.1 + 0.63


def test_isolated_clicks_never_trigger() -> None:
    click_train = np.concatenate([np.concatenate([speech(0.03), silence(0.06)])] * 30)
    audio = np.concatenate([silence(0.51), click_train, silence(0.99)])
    assert run(audio) == []  # 1 voiced frame in 3 stays under start_ratio 0.5


def test_hangover_bridges_short_pauses_but_not_long_ones() -> None:
    joined = np.concatenate([silence(0.51), speech(0.99), silence(0.45), speech(0.99), silence(1)])
    assert len(bounds(run(joined))) == 1
    split = np.concatenate([silence(0.51), speech(0.99), silence(0.9), speech(0.99), silence(1)])
    ends = bounds(run(split))
    assert [r for r, _, _ in ends] == ["silence", "silence"]
    assert ends[0][2] == pytest.approx(1.5 + 0.21)
    assert ends[1][1] == pytest.approx(2.4 - 0.3)  # second pre-roll starts after the first end


def test_short_bursts_are_dropped() -> None:
    burst = np.concatenate([silence(0.51), speech(0.15), silence(1.0)])  # triggers, too short
    assert run(burst) == []
    word = np.concatenate([silence(0.51), speech(0.3), silence(1.0)])
    assert len(bounds(run(word))) == 1


def test_energy_gate_rejects_quiet_noise_and_rumble() -> None:
    def always(frame: bytes, sample_rate: int) -> bool:
        return True  # like webrtcvad firing on room noise

    t = np.arange(3 * SR) / SR
    hiss = silence(3.0, amp=3e-4)  # about -70 dBFS
    rumble = (0.1 * np.sin(2 * np.pi * 60 * t)).astype(np.float32)  # loud, but below 300 Hz
    for noise in (hiss, rumble):
        assert segment_audio(noise, vad=always) == []
        gate_off = SegmenterConfig(min_rms_dbfs=None)
        assert len(segment_audio(noise, gate_off, vad=always)) == 1
    loud = np.concatenate([hiss, speech(1.0, amp=0.05), hiss])
    assert len(segment_audio(loud, vad=always)) == 1


def monologue() -> np.ndarray:
    """Speech from 0.99 s to 27 s, with a noisy (16 s) and a clean (18.3 s) 0.3 s pause."""
    parts = [silence(0.99), speech(15.0), silence(0.3, amp=0.005), speech(2.01), silence(0.3)]
    return np.concatenate(parts + [speech(8.4), silence(0.99)])


def test_max_length_splits_at_the_quietest_pause_and_carries_the_rest() -> None:
    audio = monologue()
    events = run(audio)
    check_invariants(events, audio)
    (r1, s1, e1), (r2, s2, e2) = bounds(events)
    assert (r1, r2) == ("max_length", "silence")
    assert s1 == pytest.approx(0.69) and e1 - s1 <= 20.0
    # The clean pause (18.3-18.6 s) beats the noisy one (15.99-16.29 s); the cut is mid-pause.
    assert 18.39 <= e1 <= 18.48
    assert s2 == pytest.approx(e1)  # audio after the split opens the next utterance
    assert e2 == pytest.approx(27.0 + 0.21)


def test_max_length_without_pause_cuts_at_the_quietest_dip() -> None:
    audio = np.concatenate([silence(0.99), speech(17.01), speech(0.15, amp=0.06), speech(10.05)])
    ends = bounds(run(audio, max_utterance_s=20.0))
    assert ends[0][0] == "max_length"
    assert 18.0 <= ends[0][2] <= 18.15  # inside the quieter 150 ms, every frame still voiced
    assert ends[1] == ("flush", pytest.approx(ends[0][2]), pytest.approx(28.2))


@pytest.mark.parametrize("chunk", [1, 7, 160, 479, 480, 481, 4000, 33333])
def test_chunk_size_does_not_change_the_events(chunk: int) -> None:
    audio = monologue()[: 24 * SR + 123]  # also ends mid-utterance, mid-frame
    whole = run(audio)
    pieces = run(audio, chunk=chunk)
    check_invariants(pieces, audio)
    non_audio = [e for e in whole if not isinstance(e, SpeechAudio)]
    assert [e for e in pieces if not isinstance(e, SpeechAudio)] == non_audio
    for a, b in zip(collect_utterances(whole), collect_utterances(pieces), strict=True):
        assert np.array_equal(a.audio, b.audio)


def test_flush_ends_an_open_utterance_and_keeps_the_clock() -> None:
    audio = np.concatenate([silence(0.51), speech(2.01), speech(0.01)])  # ends mid-frame
    seg = Segmenter(vad=fake_vad)
    pushed = seg.push(audio)
    assert isinstance(pushed[0], SpeechStart) and not bounds(pushed)
    flushed = seg.flush()
    check_invariants(pushed + flushed, audio)
    assert bounds(flushed) == [("flush", pytest.approx(0.21), pytest.approx(len(audio) / SR))]
    assert seg.flush() == []
    more = seg.push(np.concatenate([speech(1.0), silence(1.0)]))
    assert more[0] == SpeechStart(pytest.approx(len(audio) / SR))  # time keeps counting
    # A pending burst shorter than min_speech_ms is dropped at flush, not announced.
    short = Segmenter(vad=fake_vad)
    assert short.push(np.concatenate([silence(0.51), speech(0.18)])) == []
    assert short.flush() == []


@pytest.mark.timeout(60)
def test_an_hour_of_mostly_silence() -> None:
    seg = Segmenter(vad=fake_vad)
    quiet, talk = silence(1.0), speech(1.0)
    events: list[Event] = []
    for second in range(3600):  # one 2 s utterance every 5 minutes
        events += seg.push(talk if second % 300 in (100, 101) else quiet)
    events += seg.flush()
    ends = bounds(events)
    assert len(ends) == 12
    # Speech starts inside the frame at 99.99 s: 0.3 s pre-roll before it, 0.21 s tail after.
    assert [s for _, s, _ in ends] == pytest.approx([99.69 + 300 * k for k in range(12)])
    assert all(e - s == pytest.approx(0.31 + 2.0 + 0.21) for _, s, e in ends)


def test_config_is_validated() -> None:
    with pytest.raises(ValueError):
        SegmenterConfig(frame_ms=25)
    with pytest.raises(ValueError):
        SegmenterConfig(tail_ms=900)
    with pytest.raises(ValueError):
        SegmenterConfig(aggressiveness=4)
    with pytest.raises(ValueError):
        Segmenter(vad=fake_vad).push(np.zeros((2, 480), dtype=np.float32))


# -- real webrtcvad on real audio ----------------------------------------------------------------


def load(name: str) -> np.ndarray:
    audio, sr = sf.read(DATA / name, dtype="float32")
    assert sr == SR and audio.ndim == 1
    return audio


def speech_frames(audio: np.ndarray) -> np.ndarray:
    """Frames that surely hold speech: within 25 dB of the clip's loud frames (speech band)."""
    frames = audio[: len(audio) // 480 * 480].reshape(-1, 480)
    spec = np.abs(np.fft.rfft(frames * np.hanning(480), axis=1)) ** 2
    band = (np.fft.rfftfreq(480, 1 / SR) >= 300) & (np.fft.rfftfreq(480, 1 / SR) <= 4000)
    levels = 10 * np.log10(2 * spec[:, band].sum(axis=1) / (480**2 * 0.375) + 1e-12)
    return np.flatnonzero(levels >= max(-50.0, float(np.percentile(levels, 95)) - 25.0))


def test_room_noise_gives_no_utterance() -> None:
    audio = load("sv_real_silence_u0016001.wav")
    assert segment_audio(audio) == []
    # The clip has a low-frequency thump that webrtcvad calls speech: the gate is what stops it.
    assert segment_audio(audio, SegmenterConfig(min_rms_dbfs=None))


MANIFEST = [json.loads(line) for line in (DATA / "manifest.jsonl").read_text().splitlines()]
SPEECH_CLIPS = [m["audio"] for m in MANIFEST if m["text"]]


@pytest.mark.parametrize("name", SPEECH_CLIPS)
def test_real_speech_is_covered(name: str) -> None:
    audio = load(name)
    utts = segment_audio(audio)
    assert utts
    covered = np.zeros(len(audio) // 480 + 1, dtype=bool)
    for u in utts:
        covered[round(u.start * SR) // 480 : round(u.end * SR) // 480 + 1] = True
        assert u.end - u.start >= 0.24
    missing = [i for i in speech_frames(audio) if not covered[i]]
    assert missing == [], f"speech frames outside every utterance: {missing}"


def test_jfk_live_matches_offline() -> None:
    audio = load("en_real_jfk.wav")
    offline = segment_audio(audio)
    assert 1 <= len(offline) <= 2  # pauses after commas are bridged, not cut into words
    seg = Segmenter()
    events: list[Event] = []
    for i in range(0, len(audio), 1234):
        events += seg.push(audio[i : i + 1234])
    events += seg.flush()
    check_invariants(events, audio)
    assert [(u.start, u.end) for u in collect_utterances(events)] == [
        (u.start, u.end) for u in offline
    ]


def test_audio_pieces_say_how_much_of_their_end_is_unvoiced() -> None:
    """The policy starts an early final when a pause begins: it needs to see the pause."""
    audio = np.concatenate([silence(0.6), speech(1.2), silence(1.5)])
    events = run(audio, chunk=SR // 10, tail_ms=210)
    pieces = [e for e in events if isinstance(e, SpeechAudio)]
    end = next(e for e in events if isinstance(e, SpeechEnd))
    voice_end = 0.6 + 1.2
    for p in pieces:
        if p.end <= voice_end + 1e-6:
            assert p.silent_tail == pytest.approx(0.0, abs=0.031)  # speech to the piece's end
        elif p.start < voice_end - 1e-6:  # voice, then the first of the segmenter's tail
            assert p.end - p.silent_tail == pytest.approx(voice_end, abs=0.031)
        else:  # the rest of the tail: no voice at all
            assert p.silent_tail == pytest.approx(p.end - p.start)
    assert pieces[-1].end == pytest.approx(end.end)
    assert end.end - voice_end == pytest.approx(0.21, abs=0.031)  # the tail, all unvoiced
