"""Greedy Whisper decoding that verifies drafts in one forward pass over the KV cache.

We own the decoder loop (no ``generate``): it saves generate's per-token overhead as well as
forward passes, and lets every drafter share the same verify step. The output is token for
token what the main model's own greedy ``generate`` returns with the same prefix, suppress
rules and stop rules (see ``reference.py`` and the tests). The pieces it drives have their own
modules: ``row`` (one decode's state and rules: drafts, accept, stop rules, K, the result; the
batched loop shares it), ``spec`` (token ids, the forced prefix), ``step`` (a forward pass and
the exact greedy choice), ``language`` (detection); features and the encoder are ``frontend``'s.

The tokens never depend on the vocabulary screen (``step``'s ``screen``); the log-probabilities
do, within a bound derived in ``screen.py``, which ``decode_bounded`` reports per decode.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from streamcap.core.decode_types import DecodeResult, DecodingOptions
from streamcap.decoding.drafters import Drafter, NoDrafter
from streamcap.decoding.guard import LoopGuard
from streamcap.decoding.language import detect_language_prob
from streamcap.decoding.row import DecodeRow
from streamcap.decoding.spec import WhisperSpec
from streamcap.decoding.step import DecoderStep, crop_cache
from streamcap.decoding.verify import DraftLength

__all__ = ["SpeculativeDecoder"]

_VERIFY_CHUNK = 8  # rows projected onto the vocabulary at a time while verifying


@dataclass(frozen=True)
class LogprobBound:
    """How far one decode's log-probabilities may lie from what the full fp32 projection
    gives for the same tokens (derived in ``screen.py``; all 0 without a screen)."""

    avg_logprob: float  # |avg_logprob - the fp32 projection's| <= this
    no_speech_prob: float  # |no_speech_prob - the fp32 projection's| <= this
    max_token: float  # the largest bound of one token's log-probability
    kernels: frozenset[str]  # what gave the greedy choices' logits: "fp32", "int8", "bf16"


class SpeculativeDecoder:
    """The decoder loop of one model: drafts verified against its greedy choices."""

    def __init__(
        self,
        model: Any,
        processor: Any,
        device: str,
        dtype: torch.dtype,
        *,
        lean: bool = True,
        screen: bool | None = None,
    ) -> None:
        self.model: Any = model
        self.device = torch.device(device)
        self.spec = WhisperSpec(model, processor)
        self.step = DecoderStep(model, self.spec, device, dtype, lean=lean, screen=screen)

    def _verify_rows(
        self,
        rows: torch.Tensor,
        draft: Sequence[int],
        *,
        begin: bool,
        extra: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, list[int], torch.Tensor | None, list[str]]:
        """Greedy choices after each row, projecting onto the vocabulary chunk by chunk.

        The projection onto the vocabulary is the costliest part of a step, so rows past the
        first disagreement with the draft are never projected. ``extra`` (the <|sot|> row,
        for the no-speech probability) rides along with the first chunk; its unmasked
        logits come back third. Fourth: the kernel that gave each row's logits (``extra``'s
        is the first row's).
        """
        parts: list[torch.Tensor] = []
        kernels: list[str] = []
        predicted: list[int] = []
        extra_logits: torch.Tensor | None = None
        for c0 in range(0, rows.shape[0], _VERIFY_CHUNK):
            chunk = rows[c0 : c0 + _VERIFY_CHUNK]
            if c0 == 0 and extra is not None:
                logits, chosen = self.step.choose(torch.cat([extra[None], chunk]), begin, skip=1)
                extra_logits, logits = logits[0], logits[1:]
                kernels += [self.step.kernel(len(chunk) + 1)] * len(chunk)
            else:
                logits, chosen = self.step.choose(chunk, begin and c0 == 0)
                kernels += [self.step.kernel(len(chunk))] * len(chunk)
            parts.append(logits)
            predicted += chosen
            checked = min(len(predicted), len(draft))
            if any(predicted[i] != draft[i] for i in range(c0, checked)):
                break
        logits = parts[0] if len(parts) == 1 else torch.cat(parts)
        return logits, predicted, extra_logits, kernels

    def decode(
        self,
        enc: torch.Tensor,
        options: DecodingOptions,
        drafter: Drafter | None = None,
        duration_s: float = 30.0,
        guard: LoopGuard | None = None,
        draft_length: DraftLength | None = None,
    ) -> DecodeResult:
        """Greedy decode of one window, verifying drafts from ``drafter``."""
        args = (enc, options, drafter, duration_s, guard, draft_length)
        return self._decode(*args, bounded=False)[0]

    def decode_bounded(
        self,
        enc: torch.Tensor,
        options: DecodingOptions,
        drafter: Drafter | None = None,
        duration_s: float = 30.0,
        guard: LoopGuard | None = None,
        draft_length: DraftLength | None = None,
    ) -> tuple[DecodeResult, LogprobBound]:
        """``decode`` (the same result) and the derived bound on how far its log-probabilities
        may lie from the full fp32 projection's. Slower with a screen: the bound takes a few
        passes over the vocabulary per token."""
        args = (enc, options, drafter, duration_s, guard, draft_length)
        result, bound = self._decode(*args, bounded=True)
        assert bound is not None
        return result, bound

    @torch.inference_mode()
    def _decode(
        self,
        enc: torch.Tensor,
        options: DecodingOptions,
        drafter: Drafter | None,
        duration_s: float,
        guard: LoopGuard | None,
        draft_length: DraftLength | None,
        *,
        bounded: bool,
    ) -> tuple[DecodeResult, LogprobBound | None]:
        t0 = time.perf_counter()
        step, spec = self.step, self.spec
        row = DecodeRow(spec, enc, options, drafter or NoDrafter(), duration_s, guard, draft_length)
        if row.detects:
            row.detected(*detect_language_prob(step, enc))
        row.begin()
        cache = step.new_cache()
        bound_sum = max_bound = no_speech_bound = 0.0  # bounded only
        used: set[str] = set()
        while row.open:
            draft = row.next_draft()
            pending = row.pending
            hidden = step.forward(pending + draft, cache, enc)
            rows = hidden[len(pending) - 1 :]
            sot_row = row.sot_row
            extra = hidden[sot_row] if row.wants_no_speech else None
            logits, predicted, sot_logits, kernels = self._verify_rows(
                rows, draft, begin=row.first, extra=extra
            )
            if sot_logits is not None:
                sot = hidden[sot_row : sot_row + 1]
                if bounded:
                    lp, b = step.logprobs_bounded(
                        sot, sot_logits[None], [spec.no_speech], kernels[:1]
                    )
                    row.no_speech = math.exp(lp[0])
                    # the fp32 probability is within a factor exp(±b) of it, and <= 1
                    no_speech_bound = min(b[0], row.no_speech * math.expm1(b[0]))
                else:
                    lp = step.logprobs(sot, sot_logits[None], [spec.no_speech])
                    row.no_speech = math.exp(lp[0])
            used.update(kernels)
            new = list(row.settle(predicted).appended)
            if new:
                n_new = len(new)
                if bounded:
                    lp, b = step.logprobs_bounded(
                        rows[:n_new], logits[:n_new], new, kernels[:n_new]
                    )
                    row.add_logprobs(lp)
                    bound_sum += sum(b)
                    max_bound = max(max_bound, *b)
                else:
                    row.add_logprobs(step.logprobs(rows[:n_new], logits[:n_new], new))
            if row.open:
                crop_cache(cache, cache.get_seq_length() - row.rejected)
        result = row.result(time.perf_counter() - t0)
        bound = None
        if bounded:
            n = len(result.tokens)
            avg = bound_sum / n if n else 0.0
            bound = LogprobBound(avg, no_speech_bound, max_bound, frozenset(used))
        return result, bound
