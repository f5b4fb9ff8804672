"""Numbers every layer agrees on, defined once.

Audio inside the pipeline is mono float32 at `SAMPLE_RATE`; Whisper's encoder sees at most
`WINDOW_S` seconds and gives `ENCODER_POSITIONS_PER_S` output positions per second of input
(1500 for 30 s: a 10 ms hop, then a stride-2 convolution).
"""

from __future__ import annotations

from pathlib import Path

#: Samples per second of audio inside the pipeline (what Whisper expects).
SAMPLE_RATE = 16000
#: Whisper's input window, seconds.
WINDOW_S = 30.0
#: Encoder output positions per second of audio.
ENCODER_POSITIONS_PER_S = 50
#: Encoder output positions of a full window.
ENCODER_POSITIONS = int(WINDOW_S * ENCODER_POSITIONS_PER_S)

#: The speech sample shipped in the package (11 s of JFK): the demo's audio and the speech the
#: vocabulary screen's timing decodes (`runtime.screen_probe`).
BUNDLED_SAMPLE = Path(__file__).resolve().parent.parent / "samples" / "jfk.wav"
