"""Spoken-language detection: Whisper's own rule, one decoder step on <|sot|>."""

from __future__ import annotations

import math

import torch

from streamcap.decoding.step import DecoderStep


@torch.inference_mode()
def detect_language(step: DecoderStep, enc: torch.Tensor) -> tuple[int, float]:
    """Most likely language token (-1 for an English-only model) and the no-speech
    probability, from the full fp32 logits after <|sot|> over encoder output ``enc``."""
    spec = step.spec
    logits = step.logits(step.forward([spec.sot], step.new_cache(), enc))[-1]
    no_speech = float(torch.softmax(logits, -1)[spec.no_speech])
    if step.not_language_mask is None:
        return -1, no_speech
    masked = logits.masked_fill(step.not_language_mask, -math.inf)
    return int(masked.argmax()), no_speech
