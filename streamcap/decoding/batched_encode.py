"""Several windows through the encoder in one call (``Engine.encode``'s rule, batched).

Windows are grouped by their encoder context (positions): a group's log-mel features are
stacked and encoded in one call. The encoder is compute-bound, so batching saves less than it
does for decoder steps (``scripts/bench_batching.py`` measures it per batch size), and a
batched encoder output differs from a batch-1 one in the last bits. Partials are previews and
may use it freely; whether finals may is what the bench's "finals" check reports.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import torch

from streamcap.core.constants import (
    ENCODER_POSITIONS,
    ENCODER_POSITIONS_PER_S,
    SAMPLE_RATE,
    WINDOW_S,
)
from streamcap.decoding.frontend import MEL_FRAMES_PER_POSITION, WhisperFrontEnd


@dataclass(frozen=True)
class EncodedWindow:
    """One window's encoder output (``Engine``'s ``Encoded`` has the same first fields)."""

    enc: torch.Tensor  # (1, T, D): a view into its group's batched output
    features: torch.Tensor  # (1, mels, frames)
    duration_s: float
    encoder_s: float  # the group call's time, shared evenly by its windows
    positions: int | None  # None: the full 30 s context


#: A shortened encoder context is rounded up to a multiple of this many positions (10: 0.2 s).
#: Every distinct length is a new shape for the CPU kernels: oneDNN keeps compiled kernels per
#: shape and glibc's arenas fragment on buffers of ever new sizes, so with any length a long
#: run's memory never stops growing. Measured (`scripts/bench_memory.py --decodes 200`, base,
#: bf16 encoder on an AMX CPU, partials of 1-12 s and a final every fourth decode): the C heap
#: in use grew 85 MB per 100 decodes over the second half with any length, 49 on a 5-position
#: grid, and stopped at ~325 MB (every one of its 120 shapes seen) on a 10-position grid and at
#: ~250 MB on a 25-position one. Chosen as the coarsest grid that changes no caption: the 10
#: grid gave the same finals as no grid on lf3, lf6 and lf2 (`eval_stream.py`, simulated
#: clock), the 25 grid changed lf2 (one partial-locked "And", stream WER 2.7 -> 3.0 %).
CONTEXT_STEP_POSITIONS = 10


def context_positions(samples: int, context_s: float | None, step: int | None = None) -> int | None:
    """Encoder positions ``Engine.encode`` runs for a window (None: the full context), rounded
    up to a multiple of `step` (default `CONTEXT_STEP_POSITIONS`)."""
    if context_s is None:
        return None
    seconds = min(WINDOW_S, max(context_s, samples / SAMPLE_RATE))
    positions = math.ceil(seconds * ENCODER_POSITIONS_PER_S - 1e-6)
    grid = CONTEXT_STEP_POSITIONS if step is None else step
    positions = -(-positions // grid) * grid
    return positions if 0 < positions < ENCODER_POSITIONS else None


@torch.inference_mode()
def encode_windows(
    frontend: WhisperFrontEnd,
    windows: Sequence[tuple[npt.NDArray[np.float32], float | None]],
    max_batch: int | None = None,
) -> list[EncodedWindow]:
    """Encode ``(audio, context_s)`` windows, one encoder call per group of equal context
    (at most ``max_batch`` windows a call); results in the order given."""
    for audio, _ in windows:
        if len(audio) > WINDOW_S * SAMPLE_RATE:
            raise ValueError("a window holds at most 30 s of audio")
    groups: dict[int | None, list[int]] = {}
    for i, (audio, context_s) in enumerate(windows):
        groups.setdefault(context_positions(len(audio), context_s), []).append(i)
    out: list[EncodedWindow | None] = [None] * len(windows)
    size = max_batch or len(windows) or 1
    for positions, members in groups.items():
        for c in range(0, len(members), size):
            chunk = members[c : c + size]
            t0 = time.perf_counter()
            frames = MEL_FRAMES_PER_POSITION * positions if positions is not None else None
            feats = [frontend.features(windows[i][0], frames) for i in chunk]
            enc = frontend.encode(feats[0] if len(feats) == 1 else torch.cat(feats), positions)
            share = (time.perf_counter() - t0) / len(chunk)
            for b, i in enumerate(chunk):
                duration = len(windows[i][0]) / SAMPLE_RATE
                out[i] = EncodedWindow(enc[b : b + 1], feats[b], duration, share, positions)
    return [w for w in out if w is not None]
