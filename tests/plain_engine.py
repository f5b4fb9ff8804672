"""A plain greedy engine: the example of a new inference engine (`streamcap.runtime.engines`).

It runs the transformers `Engine`'s model and decodes with no drafter at all: each token from
its own forward pass of the same decoder step (``drafter="none"``: no hypothesis, no assistant),
so its tokens are greedy's by construction. Adding an engine takes a module like this one (a
class that satisfies `runtime.engine_api.InferenceEngine` and a factory from `EngineOptions`)
and one `register_engine("plain", plain_engine_from)` call; tests/runtime/test_engine_registry.py
shows the command line, the worker, a live stream and offline transcription using it by name.
It has no batched decoding (`runtime.batching.can_batch` is False): the worker decodes its
jobs one at a time.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from streamcap.core.decode_types import DecodeResult, DecodingOptions
from streamcap.decoding.spec import WhisperSpec
from streamcap.errors import UserError
from streamcap.models.loader import LoadedModel, Placement
from streamcap.runtime.engine import Engine
from streamcap.runtime.engine_api import EncodedAudio, InferenceEngine
from streamcap.runtime.engines import EngineOptions


class PlainEngine:
    """`InferenceEngine` by greedy decoding with no drafts, on ``inner``'s model."""

    def __init__(self, inner: Engine) -> None:
        self.inner = inner

    @property
    def spec(self) -> WhisperSpec:
        return self.inner.spec

    @property
    def multilingual(self) -> bool:
        return self.inner.multilingual

    @property
    def placement(self) -> Placement:
        return self.inner.placement

    @property
    def main(self) -> LoadedModel:
        return self.inner.main

    @property
    def precision(self) -> str:
        return self.inner.precision

    def text_to_ids(self, text: str) -> tuple[int, ...]:
        return self.inner.text_to_ids(text)

    def ids_to_text(self, ids: Sequence[int]) -> str:
        return self.inner.ids_to_text(ids)

    def encode(
        self, audio: npt.NDArray[np.float32], context_s: float | None = None
    ) -> EncodedAudio:
        return self.inner.encode(audio, context_s)

    def decode(
        self,
        encoded: EncodedAudio,
        options: DecodingOptions,
        hypothesis: Sequence[int] | None = None,
    ) -> DecodeResult:
        """Greedy, one forward pass per token: ``hypothesis`` is not used."""
        return self.inner.decode(encoded, options, drafter="none")

    def align(
        self, encoded: EncodedAudio, options: DecodingOptions, result: DecodeResult
    ) -> DecodeResult:
        return self.inner.align(encoded, options, result)


def plain_engine_from(options: EngineOptions) -> InferenceEngine:
    """The registry's factory: the model loaded as ``options`` say, no draft model."""
    if options.assistant:
        raise UserError("the plain engine drafts nothing: it takes no --assistant")
    o = options
    return PlainEngine(Engine(o.model, None, o.device, o.threads, o.precision))
