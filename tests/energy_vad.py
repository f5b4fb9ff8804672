"""A trivial energy VAD: the example of a new voice detector (`streamcap.audio.vad`).

A frame is voiced when its RMS reaches a level. Adding a detector takes this one function and
one `register_vad("energy", energy_vad_from)` call (tests/audio/test_vad_registry.py shows the
segmenter, a live stream and the command line using it by name); the core tests use it as a
detector that needs no real speech (loud noise is "voiced").
"""

from __future__ import annotations

import numpy as np

from streamcap.core.segmenter import SegmenterConfig, VadFn


def energy_vad(level_dbfs: float = -40.0) -> VadFn:
    """Voiced: 16-bit PCM frames whose RMS reaches ``level_dbfs``."""
    floor = 32768.0 * 10 ** (level_dbfs / 20)

    def is_speech(frame: bytes, sample_rate: int) -> bool:
        pcm = np.frombuffer(frame, dtype="<i2").astype(np.float64)
        return bool(pcm.size) and float(np.sqrt(np.mean(pcm * pcm))) >= floor

    return is_speech


def energy_vad_from(config: SegmenterConfig) -> VadFn:
    """The registry's factory: one detector per stream (this one keeps no state)."""
    return energy_vad()
