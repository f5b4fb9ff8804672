"""Numbers every layer agrees on, defined once.

Audio inside the pipeline is mono float32 at `SAMPLE_RATE`; Whisper's encoder sees at most
`WINDOW_S` seconds and gives `ENCODER_POSITIONS_PER_S` output positions per second of input
(1500 for 30 s: a 10 ms hop, then a stride-2 convolution).
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["SAMPLE_RATE"]

#: Samples per second of audio inside the pipeline (what Whisper expects).
SAMPLE_RATE = 16000
#: The lowest sample rate audio may come in at, from a client (`server.protocol`), a file
#: (`audio.file`) or a microphone: telephone audio. Below it there is no speech to hear, and
#: a broken header's "1 Hz" made resampling allocate gigabytes (red team 2026-12-05, bug 9).
MIN_SAMPLE_RATE = 8000
#: Whisper's input window, seconds.
WINDOW_S = 30.0
#: Encoder output positions per second of audio.
ENCODER_POSITIONS_PER_S = 50
#: Encoder output positions of a full window.
ENCODER_POSITIONS = int(WINDOW_S * ENCODER_POSITIONS_PER_S)

#: The speech sample shipped in the package (11 s of JFK): the demo's audio and the speech the
#: vocabulary screen's timing decodes (`runtime.screen_probe`).
BUNDLED_SAMPLE = Path(__file__).resolve().parent.parent / "samples" / "jfk.wav"
