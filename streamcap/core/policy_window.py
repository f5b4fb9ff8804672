"""What the caption policy works with: its requests, its steps, and an open window's state.

`DecodeRequest`, `DecodeInputs`, `Step` and `DroppedFinal` are what `CaptionPolicy` hands the
runtime; `Window` is the policy's own record of one window of audio (an utterance, or the part
after a commit): its samples, its partials' history, what is locked and shown, its early final,
and its two state machines (`policy_states`: where it is in its life, and its partial decode).
Data with the few helpers that keep its audio and times consistent; the rules are in `policy.py`
(when) and `policy_text.py` (what).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from streamcap.core.captions import CaptionEvent
from streamcap.core.constants import SAMPLE_RATE
from streamcap.core.decode_types import DecodeResult
from streamcap.core.policy_config import RequestKind
from streamcap.core.policy_states import (
    PartialEvent,
    PartialState,
    WindowEvent,
    WindowState,
    partial_machine,
    window_machine,
)
from streamcap.core.state_machine import StateMachine

__all__ = ["DecodeRequest", "DroppedFinal", "Step"]

#: A closed window's final decode that the worker never delivered (dropped or failed).
NOT_DECODED = "not_decoded"


@dataclass(frozen=True, eq=False)
class DecodeRequest:
    """Decode `audio` (stream seconds `start`..`end`) of window `window`."""

    id: int
    kind: RequestKind
    window: int
    audio: np.ndarray
    start: float
    end: float
    words: bool = False  # time its words (finals always; partials when commits cut)


@dataclass(frozen=True)
class DecodeInputs:
    """What a request needs that is only known when the worker starts it."""

    prompt: str
    hypothesis: tuple[int, ...] | None


@dataclass
class Step:
    """What one input produced: decode requests to submit and captions to deliver, in order."""

    requests: list[DecodeRequest] = field(default_factory=list)
    captions: list[CaptionEvent] = field(default_factory=list)

    def extend(self, other: Step) -> None:
        self.requests += other.requests
        self.captions += other.captions


@dataclass(frozen=True)
class DroppedFinal:
    """A voiced window whose final came out with no text: segment, stream seconds, why, and
    the decode (None when there was none)."""

    segment: int
    start: float
    end: float
    reason: str
    result: DecodeResult | None


@dataclass
class Window:
    id: int
    start: float  # stream seconds of its first sample
    segment: int  # caption segment its next caption belongs to
    seg_start: float  # stream seconds where that segment's text begins
    utterance: int = 0  # the segmenter's utterance it belongs to (a split keeps it)
    chunks: list[np.ndarray] = field(default_factory=list)
    n: int = 0  # samples
    first_end: float = 0.0  # stream seconds where its first piece of audio ended
    state: StateMachine[WindowState, WindowEvent] = field(default_factory=window_machine)
    partial: StateMachine[PartialState, PartialEvent] = field(default_factory=partial_machine)
    last_partial_n: int = 0  # samples when the last partial was requested
    hypothesis: tuple[int, ...] | None = None  # tokens of the latest partial result
    history: list[list[str]] = field(default_factory=list)  # recent partials' unlocked words
    history_end: list[float] = field(default_factory=list)  # their audio ends
    locked: list[str] = field(default_factory=list)  # never change again
    locked_end: float = 0.0
    emitted: int = 0  # locked words already sent as finals
    screen: list[str] = field(default_factory=list)  # words of the partial of `segment` shown
    voice_end: float = 0.0  # stream seconds where its last voiced frame ends
    early: DecodeRequest | None = None  # its early final (state EARLY_FINAL on; None if void)
    early_result: DecodeResult | None = None  # ... its result (EARLY_FINAL_READY)

    @property
    def shown(self) -> bool:
        """Whether a partial of `segment` is on screen (a final then clears it)."""
        return bool(self.screen)

    @property
    def silence(self) -> float:
        """Seconds of unvoiced audio at its end (a pause beginning)."""
        return self.end - max(self.voice_end, self.start)

    @property
    def end(self) -> float:
        return self.start + self.n / SAMPLE_RATE

    @property
    def duration(self) -> float:
        return self.n / SAMPLE_RATE

    def audio(self) -> np.ndarray:
        if not self.chunks:
            return np.zeros(0, dtype=np.float32)
        if len(self.chunks) > 1:
            self.chunks = [np.concatenate(self.chunks)]
        return self.chunks[0]

    def append(self, samples: np.ndarray) -> None:
        self.chunks.append(samples)
        self.n += len(samples)
        if not self.first_end:
            self.first_end = self.end

    def cut(self, end: float) -> None:
        keep = max(0, min(self.n, round((end - self.start) * SAMPLE_RATE)))
        self.chunks = [self.audio()[:keep]]
        self.n = keep

    def drop_before(self, t: float) -> None:
        """Forget the audio before stream time `t` (committed): the window starts there."""
        skip = max(0, min(self.n, round((t - self.start) * SAMPLE_RATE)))
        self.chunks = [self.audio()[skip:]]
        self.n -= skip
        self.start += skip / SAMPLE_RATE
        self.last_partial_n = max(0, self.last_partial_n - skip)
        self.first_end = max(self.first_end, self.start)
