"""What the runtime uses of an inference engine: the port a new engine implements.

The worker (`runtime.worker`), the batch runner's one-window fallback, coalesced finals
(`runtime.coalesce`), offline transcription (`runtime.transcribe`) and the warm-up
(`runtime.worker.final_cost`) see an engine only as `InferenceEngine`: the model's facts
(`worker_api.ModelInfo`: tokenizer and languages, name, placement; plus its precision and the
text of token ids), and three calls on a window of audio. ``encode`` runs the encoder once per
window (an `EncodedAudio`, opaque but for its length, encoder time and positions, which the
cost model reads); ``decode`` gives the window's greedy tokens, from ``options`` and optionally
drafted from ``hypothesis`` (a previous decode: a hint for speed, never a change of tokens);
``align`` times a decode's words (finals). The window an engine's ``encode`` returns goes back
to that engine only.

What only the transformers engine (`runtime.engine.Engine`) has stays off the port: batched
lockstep decoding (`runtime.batching`, behind `can_batch`), the assistant model, the
vocabulary screen and the exactness checks' `decoding.reference` (its ``decoder``). An engine
that lacks them decodes one job at a time. Engines are made by name from `runtime.engines`.

Pure typing: nothing here imports torch or a model.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from streamcap.runtime.worker_api import ModelInfo

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from streamcap.core.decode_types import DecodeResult, DecodingOptions

__all__ = ["EncodedAudio", "InferenceEngine"]


class EncodedAudio(Protocol):
    """A window of audio run through an engine's encoder, reused by every decode of it. The
    runtime reads only these three; the rest is the engine's own (`runtime.engine.Encoded`)."""

    @property
    def duration_s(self) -> float:
        """Seconds of audio in the window (before any padding)."""
        ...

    @property
    def encoder_s(self) -> float:
        """Seconds the encoder took (the cost model's input, a job's encoder time)."""
        ...

    @property
    def positions(self) -> int:
        """Encoder positions the window ran (Whisper: 1500 for the full 30 s; fewer for a
        partial's shortened context): the encoder's cost key and a job's context."""
        ...


class InferenceEngine(ModelInfo, Protocol):
    """A model that decodes windows of 16 kHz mono float32 audio (see the module docstring).
    One thread uses an engine at a time (the worker's, or its owner's)."""

    @property
    def precision(self) -> str:
        """What runs at which precision, for the loading note and ``streamcap_engine_info``."""
        ...

    def ids_to_text(self, ids: Sequence[int]) -> str:
        """The text of token ids, special tokens skipped (a coalesced result cut in parts)."""
        ...

    def encode(
        self, audio: npt.NDArray[np.float32], context_s: float | None = None
    ) -> EncodedAudio:
        """Up to 30 s of audio through the encoder. ``context_s`` (partials only) may shorten
        the encoder's context to about that many seconds; None: the model's standard input
        (finals, which must be exact)."""
        ...

    def decode(
        self,
        encoded: EncodedAudio,
        options: DecodingOptions,
        hypothesis: Sequence[int] | None = None,
    ) -> DecodeResult:
        """The window's greedy decode with ``options``; ``hypothesis`` (tokens of an earlier
        decode of the same speech) may speed it up, never change it. The result's
        ``stats.encoder_s`` is the window's encoder time."""
        ...

    def align(
        self, encoded: EncodedAudio, options: DecodingOptions, result: DecodeResult
    ) -> DecodeResult:
        """``result`` (a decode of ``encoded`` with ``options``) with its ``words`` timed,
        seconds from the window's first sample; tokens and text untouched."""
        ...
