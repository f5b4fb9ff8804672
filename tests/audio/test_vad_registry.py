"""A voice detector is a port with a registry (`streamcap.audio.vad`): a new one is a factory
and one `register_vad` call. The example is the trivial energy VAD of tests/energy_vad.py:
registered here, the segmenter, a live stream and offline transcription use it by name."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
from energy_vad import energy_vad_from

from streamcap.audio.vad import _REGISTRY, UnknownVad, make_vad, register_vad, vad_names
from streamcap.core.live_config import LiveConfig
from streamcap.core.segmenter import Segmenter, SegmenterConfig, collect_utterances

SR = 16000


@pytest.fixture
def energy() -> Iterator[None]:
    register_vad("energy", energy_vad_from)
    try:
        yield
    finally:
        _REGISTRY.pop("energy", None)


def test_a_registered_vad_is_chosen_by_name(energy: None) -> None:
    assert vad_names()[:2] == ("webrtc", "silero") and "energy" in vad_names()
    config = SegmenterConfig(vad="energy")
    rng = np.random.default_rng(1)
    audio = np.concatenate(
        [np.zeros(SR, np.float32), (0.2 * rng.standard_normal(2 * SR)).astype(np.float32),
         np.zeros(SR, np.float32)]
    )  # fmt: skip
    seg = Segmenter(config, make_vad(config))
    (utt,) = collect_utterances(seg.push(audio) + seg.flush())
    assert 0.6 <= utt.start <= 1.0 and 3.0 <= utt.end <= 3.3  # the loud part, pre-roll + tail


def test_an_unknown_vad_names_the_registered_ones() -> None:
    with pytest.raises(UnknownVad, match="unknown VAD 'nope': one of webrtc, silero"):
        make_vad(SegmenterConfig(vad="nope"))


@pytest.mark.model
def test_live_and_offline_pipelines_take_the_registered_vad(energy: None, engine) -> None:  # noqa: ANN001
    """The bundled model on real speech, the utterances cut by the energy VAD."""
    from conftest import DATA

    from streamcap.audio import load_audio
    from streamcap.runtime.clock import SimulatedClock
    from streamcap.runtime.replay import replay
    from streamcap.runtime.stream import LiveStream
    from streamcap.runtime.transcribe import TranscribeOptions, Transcription
    from streamcap.runtime.worker import InferenceWorker

    jfk = load_audio(DATA / "en_real_jfk.wav")
    config = LiveConfig(language="en", segmenter=SegmenterConfig(vad="energy"))
    finals: list[str] = []
    stream = LiveStream("e", InferenceWorker(engine), None, config, SimulatedClock())
    stream.on_caption = lambda ev: finals.append(ev.text) if ev.type == "final" else None
    replay(stream, jfk)
    assert "country" in " ".join(finals).lower()
    options = TranscribeOptions(segmenter=SegmenterConfig(vad="energy"), word_timestamps=False)
    offline = list(Transcription(engine, DATA / "en_real_jfk.wav", options))
    assert "country" in " ".join(c.text for c in offline).lower()
