"""Where a microphone heard no speech (`Segmenter.quiet`): what a room's cross-talk check asks
of another publisher's pipeline before it shows a caption at once (`core.crosstalk`).

The span must never claim silence where an utterance is open or may still start (its pre-roll
reaches back before the frame that triggers it), and must follow the audio while it is silent.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from energy_vad import energy_vad

from streamcap.core.constants import SAMPLE_RATE
from streamcap.core.segmenter import Segmenter, SegmenterConfig, SpeechEnd, SpeechStart

SR = SAMPLE_RATE


def tone(seconds: float, amp: float) -> np.ndarray:
    t = np.arange(round(seconds * SR)) / SR
    return (amp * np.sin(2 * np.pi * 1000 * t)).astype(np.float32)


def test_the_quiet_span_follows_silence_and_stops_where_speech_may_start() -> None:
    cfg = SegmenterConfig(min_rms_dbfs=None)
    seg = Segmenter(cfg, vad=energy_vad(-40.0))
    assert seg.quiet == (-math.inf, 0.0)  # nothing heard yet
    held = (cfg.preroll_ms + cfg.start_window_ms) / 1000  # an utterance may start this far back
    events = seg.push(tone(2.0, 0.0))
    assert not events
    a, b = seg.quiet
    assert a == -math.inf and b == pytest.approx(2.0 - held, abs=0.031)
    events = seg.push(tone(0.1, 0.3))  # a voice begins: not yet an utterance (pending)
    events += seg.push(tone(0.9, 0.3))
    start = next(e.start for e in events if isinstance(e, SpeechStart))
    assert seg.quiet == (-math.inf, start) and start < 2.0 and start >= b - 1e-9
    events = seg.push(tone(1.5, 0.0))  # it ends; silence again
    end = next(e.end for e in events if isinstance(e, SpeechEnd))
    a, b = seg.quiet
    assert a == end and b == pytest.approx(4.5 - held, abs=0.031)
    # a pause flushes the open state: nothing can start before the audio analysed
    seg.push(tone(0.5, 0.3))
    assert seg.quiet[1] <= 4.5  # open again
    seg.flush()
    a, b = seg.quiet
    assert a > 4.5 and b == pytest.approx(seg.time)
