"""Exact speculative greedy decoding for Whisper.

Names are imported lazily: ``options`` and ``verify`` are pure and light, while the decoder
pulls in torch, which command-line start-up should not pay for until it decodes.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "DecodeResult": "options",
    "DecodeStats": "options",
    "DecodingOptions": "options",
    "Drafter": "drafters",
    "HypothesisDrafter": "drafters",
    "ModelDrafter": "drafters",
    "NoDrafter": "drafters",
    "LoopGuard": "guard",
    "SpeculativeDecoder": "speculative",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
