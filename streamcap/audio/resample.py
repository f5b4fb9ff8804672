"""Chunked resampling to the pipeline's 16 kHz for live input (mic, WebSocket) at any rate."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np
import soxr

from streamcap.core.constants import SAMPLE_RATE

__all__ = ["TARGET_RATE", "StreamResampler", "to_mono_float32"]

#: The sample rate of all audio inside the pipeline (the audio API's name for `SAMPLE_RATE`).
TARGET_RATE = SAMPLE_RATE
#: The most samples `resample_blocks` yields at once (8 s at 16 kHz, 512 KB of float32):
#: whatever the ratio, one block in never asks for more memory than this out.
MAX_BLOCK = 1 << 17


def to_mono_float32(chunk: np.ndarray) -> np.ndarray:
    """Return ``chunk`` as 1-D float32; a 2-D ``(frames, channels)`` block is averaged."""
    x = np.asarray(chunk)
    if x.ndim == 2:
        x = x.mean(axis=1) if x.shape[1] > 1 else x[:, 0]
    elif x.ndim != 1:
        raise ValueError(f"expected audio of shape (n,) or (n, channels), got {x.shape}")
    return np.ascontiguousarray(x, dtype=np.float32)


def resample(audio: np.ndarray, in_rate: float, out_rate: float = TARGET_RATE) -> np.ndarray:
    """One-shot high-quality resampling of mono audio (no-op copy when the rates are equal)."""
    x = to_mono_float32(audio)
    if in_rate == out_rate or x.size == 0:
        return x.copy()
    return soxr.resample(x, in_rate, out_rate, quality="HQ").astype(np.float32, copy=False)


class StreamResampler:
    """Stateful resampler for audio that arrives in pieces.

    Resampling each chunk on its own would click at every boundary (the filter needs the samples
    on both sides); ``soxr.ResampleStream`` keeps that state, so the concatenated output matches
    one-shot resampling of the whole signal. Not thread-safe: one producer per instance.
    """

    def __init__(self, in_rate: float, out_rate: float = TARGET_RATE, quality: str = "HQ") -> None:
        if in_rate <= 0 or out_rate <= 0:
            raise ValueError(f"sample rates must be positive, got {in_rate} -> {out_rate}")
        self.in_rate = float(in_rate)
        self.out_rate = float(out_rate)
        self.passthrough = self.in_rate == self.out_rate
        self._quality = quality
        self._stream: soxr.ResampleStream | None = None
        self._reset()

    def _reset(self) -> None:
        self._stream = None
        if not self.passthrough:
            self._stream = soxr.ResampleStream(
                self.in_rate, self.out_rate, 1, dtype="float32", quality=self._quality
            )

    def process(self, chunk: np.ndarray) -> np.ndarray:
        """Feed one chunk (mono, or ``(frames, channels)`` to downmix); return what is ready."""
        x = to_mono_float32(chunk)
        if self._stream is None:
            return x.copy()
        return self._stream.resample_chunk(x, last=False)

    def flush(self) -> np.ndarray:
        """Return the samples still held in the filter; the resampler can then start afresh."""
        if self._stream is None:
            return np.zeros(0, dtype=np.float32)
        out = self._stream.resample_chunk(np.zeros(0, dtype=np.float32), last=True)
        self._reset()
        return out


def resample_blocks(
    blocks: Iterable[tuple[np.ndarray, float]], out_rate: float = TARGET_RATE
) -> Iterator[np.ndarray]:
    """Mono blocks, each with its sample rate, resampled to `out_rate` as one stream (a new
    filter where the rate changes), in blocks of at most `MAX_BLOCK` samples: an input block
    is fed in slices small enough for that, so memory is bounded by the output block, not by
    the ratio (a header claiming 1 Hz asked for 4.2 GB per 65 536-sample block)."""
    rs: StreamResampler | None = None
    for block, rate in blocks:
        if rs is None or rs.in_rate != rate:
            if rs is not None:
                yield from _bounded(rs.flush())
            rs = StreamResampler(rate, out_rate)
        step = max(1, int(MAX_BLOCK * rs.in_rate / rs.out_rate) // 2)  # soxr may hold some back
        for i in range(0, len(block), step):
            yield from _bounded(rs.process(block[i : i + step]))
    if rs is not None:
        yield from _bounded(rs.flush())


def _bounded(out: np.ndarray) -> Iterator[np.ndarray]:
    for i in range(0, len(out), MAX_BLOCK):
        yield out[i : i + MAX_BLOCK]
