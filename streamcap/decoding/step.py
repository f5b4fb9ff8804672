"""One decoder step of a Whisper model: a forward pass over a KV cache, then greedy choices.

The step is shared by everything that runs a decoder: the speculative loop (verifying drafts),
language detection (one step on <|sot|>) and an assistant model (drafting). It runs the layers
through ``lean.py`` (bit-identical to transformers' modules, preallocated KV cache) and picks
tokens through ``screen.py`` (exact fp32 argmax from a bounded int8/bf16 projection) where
those apply, else through transformers' own forward and the full fp32 projection.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Sequence
from typing import Any

import torch

from streamcap.decoding.lean import LeanDecoder, supports
from streamcap.decoding.screen import ScreenedProjection, screen_is_default
from streamcap.decoding.spec import WhisperSpec

__all__ = ["DecoderStep"]


def _cache_kwarg(decoder: Any) -> str:
    params = inspect.signature(decoder.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def crop_cache(cache: Any, length: int) -> None:
    """Drop cached positions beyond ``length`` (negative crop works across transformers 4/5)."""
    extra = cache.get_seq_length() - length
    if extra > 0:
        cache.crop(-extra)


class DecoderStep:
    """Forward passes and suppress-rule-aware greedy choices of one model's decoder.

    ``lean``: run the layers by hand where the decoder is laid out like transformers'
    ``WhisperDecoder``; ``screen``: pick tokens through the bounded vocabulary screen (True:
    on any CPU, it needs an fp32 decoder there; False: never; None: where
    ``screen.screen_is_default`` says, for an fp32 decoder on a CPU). Both change speed, never a
    token; the screen's log-probabilities are within a derived bound (``logprobs_bounded``).
    """

    def __init__(
        self,
        model: Any,
        spec: WhisperSpec,
        device: str,
        dtype: torch.dtype,
        *,
        lean: bool = True,
        screen: bool | None = None,
    ) -> None:
        self.spec = spec
        self.device = torch.device(device)
        self.decoder: Any = model.model.decoder
        self.proj_out: Any = model.proj_out
        self._cache_kw = _cache_kwarg(self.decoder)
        self.lean = LeanDecoder(self.decoder) if lean and supports(self.decoder) else None
        vocab = spec.vocab_size
        #: tokens never generated, and (a superset) tokens never generated first
        self.suppress_mask = torch.zeros(vocab, dtype=torch.bool, device=self.device)
        self.suppress_mask[[t for t in spec.suppress if t < vocab]] = True
        self.begin_mask = torch.zeros(vocab, dtype=torch.bool, device=self.device)
        self.begin_mask[[t for t in spec.begin_suppress if t < vocab]] = True
        self.begin_mask |= self.suppress_mask
        #: every token but the language tokens (None: an English-only model)
        self.not_language_mask: torch.Tensor | None = None
        if spec.lang_to_id:
            self.not_language_mask = torch.ones(vocab, dtype=torch.bool, device=self.device)
            self.not_language_mask[list(spec.lang_to_id.values())] = False
        self.screen: ScreenedProjection | None = None
        fits = self.device.type == "cpu" and dtype == torch.float32
        if screen and not fits:
            raise ValueError("the vocabulary screen runs on a CPU over an fp32 decoder")
        if screen or (screen is None and fits and screen_is_default()):
            self.screen = ScreenedProjection(self.proj_out.weight)

    def new_cache(self) -> Any:
        """An empty KV cache for one decode."""
        if self.lean is not None:
            return self.lean.new_cache()
        from transformers.cache_utils import DynamicCache, EncoderDecoderCache

        return EncoderDecoderCache(DynamicCache(), DynamicCache())

    def forward(self, tokens: Sequence[int], cache: Any, enc: torch.Tensor) -> torch.Tensor:
        """Hidden states of ``tokens`` appended to ``cache`` (which then holds them too)."""
        if self.lean is not None:
            return self.lean.forward(tokens, cache, enc)
        ids = torch.tensor([list(tokens)], dtype=torch.long, device=self.device)
        out = self.decoder(
            input_ids=ids,
            encoder_hidden_states=enc,
            use_cache=True,
            **{self._cache_kw: cache},
        )
        hidden: torch.Tensor = out.last_hidden_state[0]
        return hidden

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Full fp32 logits of hidden states (no suppress rules)."""
        logits: torch.Tensor = self.proj_out(hidden).float()
        return logits

    def choose(
        self, rows: torch.Tensor, begin: bool, skip: int = 0
    ) -> tuple[torch.Tensor, list[int]]:
        """Log-probability-grade logits of ``rows`` (suppressed tokens at -inf) and the exact
        greedy choice after each row but the first ``skip`` (``begin``: row ``skip`` is the
        first generated token)."""
        banned = [
            self.begin_mask if begin and i == skip else self.suppress_mask for i in range(len(rows))
        ]
        if self.screen is not None:
            logits, choices, _ = self.screen.choose(rows, banned, skip)
            return logits, choices
        logits = self.logits(rows)
        for i in range(skip, len(rows)):
            logits[i].masked_fill_(banned[i], -math.inf)
        choices = logits[skip:].argmax(-1).tolist()
        return logits, choices

    def kernel(self, n_rows: int) -> str:
        """What gives ``choose``'s logits for a call over ``n_rows`` rows: the screen's
        ``"int8"`` or ``"bf16"`` kernel, or ``"fp32"`` (the full projection)."""
        return self.screen.kernel(n_rows) if self.screen is not None else "fp32"

    def logprobs(self, rows: torch.Tensor, logits: torch.Tensor, tokens: list[int]) -> list[float]:
        """Log-probability of ``tokens[i]`` after ``rows[i]`` (``logits``: what ``choose``
        gave for those rows)."""
        if self.screen is not None:
            return self.screen.log_softmax_at(rows, logits, tokens)
        lse = torch.logsumexp(logits, -1)
        return [float(logits[i, t] - lse[i]) for i, t in enumerate(tokens)]

    def logprobs_bounded(
        self, rows: torch.Tensor, logits: torch.Tensor, tokens: list[int], kernels: Sequence[str]
    ) -> tuple[list[float], list[float]]:
        """``logprobs`` and, per row, a bound on its distance from the log-probability the full
        fp32 projection gives (0 for fp32 rows; ``screen.py`` derives the screen's).
        ``kernels[i]``: ``kernel`` of the ``choose`` call that gave ``logits[i]``."""
        if self.screen is None or all(k == "fp32" for k in kernels):
            return self.logprobs(rows, logits, tokens), [0.0] * len(tokens)
        return self.screen.log_softmax_bounded(rows, logits, tokens, kernels)

    def greedy(self, row: torch.Tensor, begin: bool) -> int:
        """The greedy token after one hidden state through the full projection (a drafter's
        choice: no screen, no log-probabilities)."""
        logits = self.logits(row)
        logits.masked_fill_(self.suppress_mask, -math.inf)
        if begin:
            logits.masked_fill_(self.begin_mask, -math.inf)
        return int(logits.argmax())
