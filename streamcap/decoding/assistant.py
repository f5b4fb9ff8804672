"""The model-facing half of the model drafter: an assistant Whisper decoding greedily.

The assistant must share the main model's tokenizer. Its encoder output is the main one when
both encoders hold the same weights (distil-whisper keeps its teacher's encoder), which saves
a whole encoder pass per window.
"""

from __future__ import annotations

from typing import Any

import torch

from streamcap.decoding.frontend import MEL_FRAMES_PER_POSITION, WhisperFrontEnd
from streamcap.decoding.spec import WhisperSpec
from streamcap.decoding.step import DecoderStep, crop_cache

__all__ = ["AssistantDecoder"]


def same_tokenizer(main: WhisperSpec, assistant: WhisperSpec) -> bool:
    """True when the assistant speaks the main model's vocabulary (drafts are main tokens)."""
    a, b = main, assistant
    return (a.vocab_size, a.eot, a.sot, a.no_timestamps) == (
        b.vocab_size,
        b.eot,
        b.sot,
        b.no_timestamps,
    )


def same_encoder(main: Any, assistant: Any) -> bool:
    """True when the assistant's encoder is the main encoder (same shapes and weights)."""
    ma, aa = main.model.encoder, assistant.model.encoder
    if main.config.d_model != assistant.config.d_model:
        return False
    if len(ma.layers) != len(aa.layers):
        return False
    with torch.no_grad():
        return bool(
            torch.equal(ma.conv1.weight, aa.conv1.weight)
            and torch.equal(ma.layers[-1].fc2.weight, aa.layers[-1].fc2.weight)
        )


class AssistantDecoder:
    """Keeps the assistant's KV cache in step with the main output and drafts k tokens.

    ``frontend`` is the assistant's own features + encoder, or None when it shares the main
    encoder output.
    """

    def __init__(self, step: DecoderStep, frontend: WhisperFrontEnd | None = None) -> None:
        self.step = step
        self.frontend = frontend
        self._enc: torch.Tensor | None = None
        self._cache: Any = None
        self._ctx: list[int] = []  # tokens whose keys/values are in the cache
        self._first_row: int | None = None

    @property
    def share_encoder(self) -> bool:
        return self.frontend is None

    def set_window(self, main_enc: torch.Tensor, audio_features: torch.Tensor | None) -> None:
        """Called once per window, before decoding."""
        if self.frontend is None:
            self._enc = main_enc
        else:
            assert audio_features is not None
            fe = self.frontend
            feats = audio_features.to(fe.device, fe.dtype)
            self._enc = fe.encode(feats, positions=feats.shape[-1] // MEL_FRAMES_PER_POSITION)

    def reset(self) -> None:
        self._cache = self.step.new_cache()
        self._ctx = []
        self._first_row = None

    @torch.inference_mode()
    def draft(self, context: list[int], k: int) -> list[int]:
        assert self._enc is not None, "set_window() first"
        if k <= 0:
            return []
        if self._first_row is None:
            self._first_row = len(context)
        common = 0
        limit = min(len(self._ctx), len(context) - 1)  # always feed at least one token
        while common < limit and self._ctx[common] == context[common]:
            common += 1
        crop_cache(self._cache, common)
        self._ctx = self._ctx[:common]
        feed = context[common:]
        out: list[int] = []
        eot = self.step.spec.eot
        for _ in range(k):
            hidden = self.step.forward(feed, self._cache, self._enc)
            self._ctx += feed
            token = self.step.greedy(hidden[-1], begin=len(self._ctx) == self._first_row)
            out.append(token)
            if token == eot:
                break
            feed = [token]
        return out
