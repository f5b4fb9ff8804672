"""Spoken-language detection: Whisper's own rule, one decoder step on <|sot|>."""

from __future__ import annotations

import math

import torch

from streamcap.decoding.step import DecoderStep

__all__ = ["detect_language"]


@torch.inference_mode()
def detect_language_prob(step: DecoderStep, enc: torch.Tensor) -> tuple[int, float, float]:
    """Most likely language token (-1 for an English-only model), its probability among the
    language tokens (1.0 for an English-only model) and the no-speech probability, from the
    full fp32 logits after <|sot|> over encoder output ``enc``."""
    spec = step.spec
    logits = step.logits(step.forward([spec.sot], step.new_cache(), enc))[-1]
    no_speech = float(torch.softmax(logits, -1)[spec.no_speech])
    if step.not_language_mask is None:
        return -1, 1.0, no_speech
    masked = logits.masked_fill(step.not_language_mask, -math.inf)
    probs = torch.softmax(masked.float(), -1)
    token = int(probs.argmax())
    return token, float(probs[token]), no_speech


def detect_language(step: DecoderStep, enc: torch.Tensor) -> tuple[int, float]:
    """Most likely language token (-1 for an English-only model) and the no-speech
    probability (`detect_language_prob` without the language's probability)."""
    token, _, no_speech = detect_language_prob(step, enc)
    return token, no_speech
