"""Exact speculative greedy decoding for Whisper."""

from streamcap.decoding.drafters import Drafter, HypothesisDrafter, ModelDrafter, NoDrafter
from streamcap.decoding.guard import LoopGuard
from streamcap.decoding.options import DecodeResult, DecodeStats, DecodingOptions
from streamcap.decoding.speculative import SpeculativeDecoder

__all__ = [
    "DecodeResult",
    "DecodeStats",
    "DecodingOptions",
    "Drafter",
    "HypothesisDrafter",
    "LoopGuard",
    "ModelDrafter",
    "NoDrafter",
    "SpeculativeDecoder",
]
