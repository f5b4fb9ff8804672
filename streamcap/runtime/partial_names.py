"""The audio of the partial on screen, embedded as it grows: the speaker labeller's part for
partials (`runtime.labeller.SpeakerLabeller`; the rule that names one is
`core.speaker_partials.name_partial`).

A segment's partials come every `PolicyConfig.partial_interval_s` with the audio so far; the
labeller keeps that segment's `PartialWindows`: windows of the encoder's length every
`SpeakerConfig.partial_hop_s` from the segment's start, each embedded once, when all the audio
under it has arrived. So a partial costs the windows of its new audio only (about one per
`partial_hop_s` of it), whatever the partial's length; the final embeds its own audio as before.

Before the first whole window (an utterance's first partial, about 1 s against CAM++'s 1.5 s
window), where the model is calibrated for it (`SpeakerConfig.partial_short_threshold`), all
the audio so far is embedded as one *short* window (CAM++ embeds a clip shorter than a window
as one window of all its frames), again at each partial until the first whole window replaces
it: at most one embedding per partial, and about one per utterance at the default
`PolicyConfig.partial_interval_s`.
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
    (the policy's number), span, the embeddings it took (a short window counted) and the
    whole windows in all, the name given ("" for none) and its similarity, and the embedding
    time it added."""

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

    def __init__(
        self,
        segment: int,
        start: float,
        hop_s: float,
        window_s: float,
        short_min_s: float | None = None,
    ) -> None:
        self.segment = segment
        self.start = start
        self.hop_s = hop_s
        self.window_s = window_s
        self.starts = np.zeros(0, np.float64)
        self.emb: np.ndarray | None = None
        #: the least audio embedded as one short window before the first whole one (None: no
        #: short window), that window's (1, dim) embedding, and the audio's end it covers
        self.short_min_s = short_min_s
        self.short: np.ndarray | None = None
        self._short_end = start

    def grow(self, end: float, audio: AudioFn, embed: EmbedFn) -> int:
        """Embed the windows that lie whole in the audio up to ``end`` and are not yet
        embedded; with none yet, the short window of all the audio (see the module's
        docstring); how many embeddings that took."""
        first = self.start + len(self.starts) * self.hop_s  # the next window's start
        if first + self.window_s > end + 1e-6:
            return self._grow_short(end, audio, embed)
        clip, clip_t0 = audio(first, end)
        if clip.size < int(self.window_s * SAMPLE_RATE):
            return 0
        starts, emb = embed(clip)
        whole = starts + self.window_s <= clip.size / SAMPLE_RATE + 1e-6
        self.starts = np.concatenate([self.starts, starts[whole] + clip_t0])
        rows = emb[whole].astype(np.float32)
        if len(rows):  # whole windows from now on
            self.emb = rows if self.emb is None else np.concatenate([self.emb, rows])
            self.short = None
        return int(whole.sum())

    def _grow_short(self, end: float, audio: AudioFn, embed: EmbedFn) -> int:
        """The short window of the audio up to ``end``, while there is no whole window yet
        (re-embedded as the audio grows); 1 if it was embedded, else 0."""
        if self.short_min_s is None or len(self.starts) or end <= self._short_end + 1e-6:
            return 0
        clip, clip_t0 = audio(self.start, end)
        if clip.size < int(self.short_min_s * SAMPLE_RATE) or clip_t0 > self.start + 1e-3:
            return 0  # too little, or its start has left the buffer
        _, emb = embed(clip)
        if len(emb) == 0:
            return 0
        self.short = emb.astype(np.float32).mean(axis=0, keepdims=True)
        self._short_end = end
        return 1

    @property
    def embeddings(self) -> np.ndarray:
        """(windows, dim) embeddings so far: the whole windows, else the short one ((0, 0)
        before either)."""
        if self.emb is not None:
            return self.emb
        return self.short if self.short is not None else np.zeros((0, 0), np.float32)
