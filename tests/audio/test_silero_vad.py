"""Silero VAD behind the segmenter's VAD interface (`--vad silero`), on real audio from tests/data.

The model is the one inside the `silero-vad` wheel (the `silero` extra, part of `test`); nothing
is downloaded.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from streamcap.core.constants import SAMPLE_RATE
from streamcap.core.segmenter import Segmenter, SegmenterConfig, collect_utterances

pytest.importorskip("silero_vad")

from streamcap.audio.silero import SileroVad  # noqa: E402
from streamcap.audio.vad import UnknownVad, make_vad, vad_names  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / "data"
FRAME = SAMPLE_RATE * 30 // 1000  # the segmenter's 30 ms frames


def load(name: str) -> np.ndarray:
    audio, rate = sf.read(DATA / name, dtype="float32")
    assert rate == SAMPLE_RATE and audio.ndim == 1
    return audio


def decisions(vad: SileroVad, audio: np.ndarray) -> np.ndarray:
    pcm = np.rint(np.clip(audio, -1.0, 1.0) * 32767.0).astype("<i2")
    n = len(pcm) // FRAME
    return np.array(
        [vad(pcm[i * FRAME : (i + 1) * FRAME].tobytes(), SAMPLE_RATE) for i in range(n)]
    )


def test_adapter_detects_real_speech_not_silence() -> None:
    vad = SileroVad()
    speech = decisions(vad, load("en_real_jfk.wav"))
    assert speech.mean() > 0.5  # JFK speaks most of the 11 s
    vad.reset()
    silence = decisions(vad, load("sv_real_silence_u0016001.wav"))
    assert not silence.any()


def test_adapter_state_is_per_stream() -> None:
    """A reset (or a second instance) answers exactly as a fresh stream."""
    audio = load("en_real_goforward.wav")
    a, b = SileroVad(), SileroVad()
    first = decisions(a, audio)
    a.reset()
    assert np.array_equal(decisions(a, audio), first)
    assert np.array_equal(decisions(b, audio), first)


def test_adapter_rejects_other_rates() -> None:
    with pytest.raises(ValueError):
        SileroVad()(b"\0\0" * 160, 8000)


def test_segmenter_with_silero_finds_the_utterance() -> None:
    config = SegmenterConfig(vad="silero")
    vad = make_vad(config)
    assert isinstance(vad, SileroVad)
    audio = load("en_real_forever.wav")
    seg = Segmenter(config, vad)
    events = []
    for i in range(0, len(audio), 1600):  # 0.1 s pushes, as a live stream feeds it
        events += seg.push(audio[i : i + 1600])
    utts = collect_utterances(events + seg.flush())
    assert len(utts) >= 1
    voiced = sum(u.end - u.start for u in utts)
    assert voiced > 0.5 * len(audio) / SAMPLE_RATE
    # and none on real silence
    seg = Segmenter(config, make_vad(config))
    assert collect_utterances(seg.push(load("sv_real_silence_u0016001.wav")) + seg.flush()) == []


def test_webrtc_stays_the_default() -> None:
    assert SegmenterConfig().vad == "webrtc"
    assert vad_names()[0] == "webrtc"
    assert not isinstance(make_vad(SegmenterConfig()), SileroVad)
    with pytest.raises(UnknownVad, match="unknown VAD 'nope': one of webrtc, silero"):
        make_vad(SegmenterConfig(vad="nope"))


def test_cli_vad_flag_and_missing_package(monkeypatch: pytest.MonkeyPatch) -> None:
    import argparse
    import importlib.util

    from streamcap.cli.live_options import add_vad_flag, live_config, vad_from_args
    from streamcap.errors import UserError

    p = argparse.ArgumentParser()
    add_vad_flag(p)
    args = p.parse_args(["--vad", "silero"])
    assert vad_from_args(args) == "silero"
    assert live_config(vad=vad_from_args(args)).segmenter.vad == "silero"
    assert vad_from_args(p.parse_args([])) == "webrtc"
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda n, *a: None if n == "silero_vad" else real(n, *a)
    )
    with pytest.raises(UserError, match="silero"):
        vad_from_args(args)
