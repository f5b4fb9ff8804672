"""Exact speculative greedy decoding for Whisper.

One job per module (the frozen options, results and stats it shares with the pure caption
policy are `streamcap.core.decode_types`): ``spec`` (a model's token ids and forced prefix),
``frontend`` (log-mel + encoder), ``step`` (one decoder forward and the exact greedy choice,
over ``lean`` and ``screen``), ``language`` (detection), ``row`` (one decode's state and rules,
which every loop runs), ``speculative`` (the batch-1 loop), ``batched`` (many decodes in
lockstep), ``verify`` and ``guard`` (pure rules), ``drafters`` and ``assistant`` (where drafts
come from), ``reference`` (transformers' ``generate`` under the same rules), ``alignment``
(word times of a decode from the cross-attention, one more pass).

Names are imported lazily (`streamcap._face`): ``spec`` and ``verify`` are pure and light,
while the decoder pulls in torch, which command-line start-up should not pay for until it
decodes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from streamcap._face import lazy_face

if TYPE_CHECKING:  # what the names are, for type checkers; imported on first use at run time
    from streamcap.decoding.alignment import Aligner as Aligner
    from streamcap.decoding.assistant import AssistantDecoder as AssistantDecoder
    from streamcap.decoding.batched import BatchedDecoder as BatchedDecoder
    from streamcap.decoding.drafters import Drafter as Drafter
    from streamcap.decoding.drafters import HypothesisDrafter as HypothesisDrafter
    from streamcap.decoding.drafters import ModelDrafter as ModelDrafter
    from streamcap.decoding.drafters import NoDrafter as NoDrafter
    from streamcap.decoding.frontend import WhisperFrontEnd as WhisperFrontEnd
    from streamcap.decoding.guard import LoopGuard as LoopGuard
    from streamcap.decoding.language import detect_language as detect_language
    from streamcap.decoding.reference import reference_decode as reference_decode
    from streamcap.decoding.spec import DecodingError as DecodingError
    from streamcap.decoding.spec import WhisperSpec as WhisperSpec
    from streamcap.decoding.speculative import SpeculativeDecoder as SpeculativeDecoder
    from streamcap.decoding.step import DecoderStep as DecoderStep

#: public name -> the module of this package that defines it
_EXPORTS = {
    "Aligner": "alignment",
    "AssistantDecoder": "assistant",
    "BatchedDecoder": "batched",
    "Drafter": "drafters",
    "HypothesisDrafter": "drafters",
    "ModelDrafter": "drafters",
    "NoDrafter": "drafters",
    "WhisperFrontEnd": "frontend",
    "LoopGuard": "guard",
    "detect_language": "language",
    "reference_decode": "reference",
    "DecodingError": "spec",
    "WhisperSpec": "spec",
    "SpeculativeDecoder": "speculative",
    "DecoderStep": "step",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_face(__name__, _EXPORTS)
