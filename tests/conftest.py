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
