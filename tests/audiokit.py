"""Audio files made during the tests: FFmpeg's real encoders through PyAV."""

from __future__ import annotations

from pathlib import Path

import av
import numpy as np

from streamcap.audio.resample import resample

DATA = Path(__file__).parent / "data"
JFK = DATA / "en_real_jfk.wav"  # 11.0 s, 16 kHz mono


def encode(
    audio: np.ndarray,
    path: Path,
    container: str,
    codec: str | None,
    rate: int = 16000,
    layout: str = "mono",
    video: bool = False,
) -> Path:
    """Write ``audio`` (16 kHz mono) with FFmpeg's encoders; optionally with a video track first."""
    with av.open(str(path), "w", format=container) as out:
        vstream = None
        if video:
            vstream = out.add_stream("mpeg4", rate=10)
            vstream.width, vstream.height, vstream.pix_fmt = 64, 48, "yuv420p"
        if codec is not None:
            stream = out.add_stream(codec, rate=rate)
            stream.layout = layout
            x = resample(audio, 16000, rate)
            nch = 2 if layout == "stereo" else 1
            pcm = np.round(np.repeat(x[:, None], nch, axis=1) * 32767).astype(np.int16)
            frame = av.AudioFrame.from_ndarray(pcm.reshape(1, -1), format="s16", layout=layout)
            frame.sample_rate, frame.pts = rate, 0
            conv = av.AudioResampler(
                format=stream.codec_context.format.name, layout=layout, rate=rate
            )
            for f in conv.resample(frame) + conv.resample(None):
                out.mux(stream.encode(f))
            out.mux(stream.encode(None))
        if vstream is not None:
            for i in range(20):
                img = np.full((48, 64, 3), i * 10, dtype=np.uint8)
                vf = av.VideoFrame.from_ndarray(img, format="rgb24")
                vf.pts = i
                out.mux(vstream.encode(vf))
            out.mux(vstream.encode(None))
    return path
