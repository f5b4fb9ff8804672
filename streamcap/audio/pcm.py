"""Raw PCM bytes (from a socket or a browser) <-> the pipeline's mono float32 audio."""

from __future__ import annotations

from typing import Literal

import numpy as np

__all__ = ["SAMPLE_BYTES", "PcmFormat", "float_to_pcm", "pcm_to_float"]

PcmFormat = Literal["pcm_s16le", "f32le"]

#: Bytes per sample of each wire format; the keys are the formats the protocol accepts.
SAMPLE_BYTES: dict[str, int] = {"pcm_s16le": 2, "f32le": 4}


def pcm_to_float(data: bytes | bytearray | memoryview, fmt: str, channels: int) -> np.ndarray:
    """Decode interleaved little-endian PCM into mono float32 in [-1, 1].

    Channels are averaged. ``f32le`` input is sanitised (NaN/inf -> 0, clipped to [-1, 1]) because
    it comes from untrusted clients and the model must never see non-finite values.
    Raises ``ValueError`` for an unknown format, a bad channel count, or a byte length that is not
    a whole number of frames (a torn frame means the client's framing is wrong).
    """
    if fmt not in SAMPLE_BYTES:
        raise ValueError(f"unknown PCM format {fmt!r}; expected one of {sorted(SAMPLE_BYTES)}")
    if isinstance(channels, bool) or not isinstance(channels, int) or channels < 1:
        raise ValueError(f"channels must be a positive integer, got {channels!r}")
    frame_bytes = SAMPLE_BYTES[fmt] * channels
    n = memoryview(data).nbytes
    if n % frame_bytes:
        raise ValueError(
            f"{n} bytes is not a whole number of {fmt} frames "
            f"({channels} channel(s) x {SAMPLE_BYTES[fmt]} bytes = {frame_bytes} bytes per frame)"
        )
    if fmt == "pcm_s16le":
        audio = np.frombuffer(data, dtype="<i2").astype(np.float32) / np.float32(32768.0)
    else:
        audio = sanitise(np.frombuffer(data, dtype="<f4").astype(np.float32))
    if channels > 1:
        audio = audio.reshape(-1, channels).mean(axis=1, dtype=np.float32)
    return audio


def sanitise(audio: np.ndarray) -> np.ndarray:
    """Float audio the model may see: NaN and infinities become 0 (silence: a value, however
    large, that is no sample at all must not become a full-scale click), everything clipped to
    [-1, 1]. In place on a writable float32 array, which is returned. The one rule for float
    audio from outside, wire (`pcm_to_float`) and files (`audio.file`) alike: one NaN sample in
    a float WAV reached the features and crashed the decoder (red team 2026-12-05, bug 6)."""
    if audio.size and not np.isfinite(audio).all():
        np.nan_to_num(audio, copy=False, nan=0.0, posinf=0.0, neginf=0.0)
    return np.clip(audio, -1.0, 1.0, out=audio)


def float_to_pcm(audio: np.ndarray, fmt: str = "pcm_s16le") -> bytes:
    """Encode mono float audio as little-endian PCM (what a test client or a browser sends)."""
    if fmt not in SAMPLE_BYTES:
        raise ValueError(f"unknown PCM format {fmt!r}; expected one of {sorted(SAMPLE_BYTES)}")
    x = np.clip(np.asarray(audio, dtype=np.float32).reshape(-1), -1.0, 1.0)
    if fmt == "pcm_s16le":
        return np.round(x * 32767.0).astype("<i2").tobytes()
    return x.astype("<f4").tobytes()
