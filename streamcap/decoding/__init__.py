"""Exact speculative greedy decoding for Whisper.

One job per module (the frozen options, results and stats it shares with the pure caption
policy are ``streamcap.core.decode_types``, re-exported here): ``spec`` (a model's token
ids and forced prefix), ``frontend`` (log-mel + encoder), ``step`` (one decoder forward and the
exact greedy choice, over ``lean`` and ``screen``), ``language`` (detection), ``row`` (one
decode's state and rules, which every loop runs), ``speculative`` (the batch-1 loop),
``batched`` (many decodes in lockstep), ``verify`` and ``guard`` (pure rules), ``drafters``
and ``assistant`` (where drafts come from), ``reference`` (transformers' ``generate`` under the
same rules), ``alignment`` (word times of a decode from the cross-attention, one more pass).

Names are imported lazily: the types, ``spec`` and ``verify`` are pure and light, while the
decoder pulls in torch, which command-line start-up should not pay for until it decodes.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "DecodeResult": "streamcap.core.decode_types",
    "DecodeStats": "streamcap.core.decode_types",
    "DecodingError": "spec",
    "DecodingOptions": "streamcap.core.decode_types",
    "DecoderStep": "step",
    "Drafter": "drafters",
    "HypothesisDrafter": "drafters",
    "ModelDrafter": "drafters",
    "NoDrafter": "drafters",
    "LoopGuard": "guard",
    "SpeculativeDecoder": "speculative",
    "WhisperFrontEnd": "frontend",
    "WhisperSpec": "spec",
    "WordTiming": "streamcap.core.decode_types",
    "detect_language": "language",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    where = _EXPORTS[name]
    module = where if where.startswith("streamcap.") else f"{__name__}.{where}"
    return getattr(importlib.import_module(module), name)
