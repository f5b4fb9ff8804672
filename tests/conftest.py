"""Shared pytest fixtures."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pulse_mic import PulseMic, missing_reason

_PULSE_WAV = Path(__file__).parent / "data" / "en_real_jfk.wav"


@pytest.fixture
def pulse_mic(monkeypatch: pytest.MonkeyPatch) -> Iterator[PulseMic]:
    """A real PulseAudio virtual microphone (default source) looping ``en_real_jfk.wav``.

    ``PULSE_SERVER`` is set for the test; call ``pulse_mic.play(wav)`` to change what it hears.
    ``sounddevice`` reads devices at import: record in a subprocess started now (env is
    inherited), or in-process through ``streamcap.audio.list_input_devices`` (it rescans).
    """
    reason = missing_reason()
    if reason:
        pytest.skip(reason)
    mic = PulseMic().start()
    try:
        mic.play(_PULSE_WAV)
        monkeypatch.setenv("PULSE_SERVER", mic.server)
        yield mic
    finally:
        mic.stop()


DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="session")
def engine():  # noqa: ANN201 - streamcap.runtime.engine.Engine, imported lazily (torch is slow to import)
    """The real bundled Whisper base model on CPU, loaded once per test session."""
    import torch

    from streamcap.runtime.engine import Engine

    torch.set_num_threads(2)
    return Engine("base", device="cpu")


@pytest.fixture(scope="session")
def speech() -> dict[str, object]:
    """Real speech clips from tests/data (16 kHz mono float32), keyed by manifest id."""
    import json

    import soundfile as sf

    clips: dict[str, object] = {}
    for line in (DATA / "manifest.jsonl").read_text().splitlines():
        item = json.loads(line)
        audio, rate = sf.read(DATA / item["audio"], dtype="float32")
        assert rate == 16000
        clips[item["id"]] = audio
    return clips


@pytest.fixture(scope="module")
def worker(engine):  # noqa: ANN001, ANN201 - an InferenceWorker (torch is imported lazily)
    """A started inference worker on the session's engine, one per test module. Admission
    control never refuses on it (tests of other things run streams as they please); the
    admission tests make their own workers."""
    import math

    from streamcap.core.capacity import CapacityConfig
    from streamcap.runtime.worker import InferenceWorker

    lenient = CapacityConfig(max_finals_load=math.inf, max_final_wait_s=math.inf)
    w = InferenceWorker(engine, capacity=lenient).start()
    yield w
    w.stop()
