"""The audio of the partial on screen, embedded as it grows: the speaker labeller's part for
partials (`runtime.labeller.SpeakerLabeller`; the rule that names one is
`core.speaker_partials.name_partial`).

A segment's partials come every `PolicyConfig.partial_interval_s` with the audio so far; the
labeller keeps that segment's `PartialWindows`: windows of the encoder's length every
`SpeakerConfig.window_hop_s` from the segment's start, each embedded once, when all the audio
under it has arrived. So a partial costs the windows of its new audio only (about one per
`window_hop_s` of it), whatever the partial's length; the final embeds its own audio as before.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from streamcap.core.constants import SAMPLE_RATE

#: (start, end) stream seconds -> (samples still buffered, the stream time of the first)
AudioFn = Callable[[float, float], tuple[np.ndarray, float]]
#: a clip -> (window starts from its first sample, unit embeddings)
EmbedFn = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]


@dataclass(frozen=True)
class PartialRecord:
    """What the labeller decided for one partial (for evaluation and metrics): its segment
    (the policy's number), span, the windows embedded for it and in all, the name given
    ("" for none) and its similarity, and the embedding time it added."""

    segment: int
    start: float
    end: float
    new_windows: int
    windows: int
    speaker: str
    similarity: float
    embed_ms: float


class PartialWindows:
    """One segment's windows so far: starts (stream seconds, from the segment's start every
    ``hop_s``) and their embeddings."""

    def __init__(self, segment: int, start: float, hop_s: float, window_s: float) -> None:
        self.segment = segment
        self.start = start
        self.hop_s = hop_s
        self.window_s = window_s
        self.starts = np.zeros(0, np.float64)
        self.emb: np.ndarray | None = None

    def grow(self, end: float, audio: AudioFn, embed: EmbedFn) -> int:
        """Embed the windows that lie whole in the audio up to ``end`` and are not yet
        embedded; how many there were."""
        first = self.start + len(self.starts) * self.hop_s  # the next window's start
        if first + self.window_s > end + 1e-6:
            return 0
        clip, clip_t0 = audio(first, end)
        if clip.size < int(self.window_s * SAMPLE_RATE):
            return 0
        starts, emb = embed(clip)
        whole = starts + self.window_s <= clip.size / SAMPLE_RATE + 1e-6
        self.starts = np.concatenate([self.starts, starts[whole] + clip_t0])
        rows = emb[whole].astype(np.float32)
        self.emb = rows if self.emb is None else np.concatenate([self.emb, rows])
        return int(whole.sum())

    @property
    def embeddings(self) -> np.ndarray:
        """(windows, dim) embeddings so far ((0, 0) before the first)."""
        return self.emb if self.emb is not None else np.zeros((0, 0), np.float32)
