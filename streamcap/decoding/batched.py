"""The speculative decoder loop of several windows in lockstep, one batched forward a pass.

Each row (a window of one stream) runs exactly ``SpeculativeDecoder.decode``'s algorithm, the
same ``row.DecodeRow`` — language detection, forced prefix, no-speech probability, drafts with
its own :class:`DraftLength`, accept/extend under its own :class:`LoopGuard` and budget — but the
decoder forward of every row still decoding runs as one pass (``batched_lean.forward_packed``:
ragged rows, each over its own cache and encoder output) and their rows are projected onto the
vocabulary together, so the weights are read once per pass instead of once per row. Rows leave
as they finish.

Exactness. Floating-point sums of a batched linear layer may be blocked differently from a
batch-1 one, so a batched logit can differ from the batch-1 logit by a few ulps
(``MEASURED_LOGIT_DIFF``, measured by ``scripts/bench_batching.py`` over real rows). A token
whose lead over the runner-up is at least ``MARGIN`` (a safe multiple of that) is the batch-1
greedy choice too. A closer call is decided again at batch 1: the row's tokens are run through
a batch-1 lean forward over a second cache of that row holding only batch-1 keys/values (kept
between checks, so each position is computed at batch 1 at most once), and that choice is used.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from streamcap.core.decode_types import DecodeResult, DecodingOptions
from streamcap.decoding.batched_lean import Segment, forward_packed, project, twin_cache
from streamcap.decoding.drafters import Drafter, NoDrafter
from streamcap.decoding.guard import LoopGuard
from streamcap.decoding.language import detect_language_prob
from streamcap.decoding.lean import LeanCache, LeanDecoder
from streamcap.decoding.row import DecodeRow
from streamcap.decoding.speculative import SpeculativeDecoder
from streamcap.decoding.verify import DraftLength

__all__ = ["BatchedDecoder"]

#: |batched - batch-1| logits on real rows, rounded up: at most 7.6e-5 over 65 dev clips x 2
#: drafters in batches of 8 (2036 choices; base, fp32, 2 threads, ``bench_batching.py``).
MEASURED_LOGIT_DIFF = 1.0e-4
#: A batched choice leading the runner-up by less than this is decided again at batch 1.
MARGIN = 16 * MEASURED_LOGIT_DIFF
_VERIFY_CHUNK = 8  # rows per row projected at a time, as in the batch-1 loop


@dataclass(frozen=True)
class BatchCounters:
    """What batching did in one row's decode (``DecodeStats`` counts the decode itself)."""

    batch_rows: int = 0  # sum over this row's forward passes of the rows in the pass
    choices: int = 0  # greedy choices read from batched logits (up to the first rejection)
    rechecked: int = 0  # of those, decided again at batch 1 (lead under the margin)
    changed: int = 0  # rechecks where batch 1 chose another token
    recheck_tokens: int = 0  # positions run through batch-1 forwards for rechecks
    max_logit_diff: float = math.nan  # probe only: largest |batched - batch-1| logit seen


@dataclass(frozen=True)
class BatchedResult:
    result: DecodeResult
    counters: BatchCounters


class _Row(DecodeRow):
    """One row's decode (``DecodeRow``) and what batching keeps of it."""

    def __init__(self, cache: LeanCache, *row: Any) -> None:
        super().__init__(*row)  # DecodeRow's arguments
        self.cache = cache
        self.tokens: list[int] = []  # the token at each cached position
        self.decoder_s = 0.0
        self.exact: LeanCache | None = None  # batch-1 keys/values for rechecks
        self.shadow: LeanCache | None = None  # probe: the batch-1 twin of ``cache``
        # this pass
        self.base = 0  # cached positions before this pass
        self.hidden = torch.empty(0)
        self.shadow_hidden = torch.empty(0)
        self.predicted: list[int] = []
        self.parts: list[torch.Tensor] = []
        self.verifying = False  # its verify rows still agree with its draft
        self.sot_logits: torch.Tensor | None = None
        # counters
        self.batch_rows = self.choices = self.rechecked = self.changed = 0
        self.recheck_tokens = 0
        self.max_diff = 0.0

    @property
    def n_rows(self) -> int:  # rows whose greedy choice this pass verifies
        return len(self.draft) + 1

    def row(self, i: int) -> int:  # index in this pass's hidden states of verify row i
        return len(self.pending) - 1 + i


def _lse_at(logits: torch.Tensor, tokens: Sequence[int]) -> list[float]:
    """log-softmax of each row at its token (``DecoderStep.logprobs`` without a screen)."""
    lse = torch.logsumexp(logits, -1)
    return [float(logits[i, t] - lse[i]) for i, t in enumerate(tokens)]


class BatchedDecoder:
    """Decodes several windows in lockstep with ``decoder``'s model, step and rules.

    ``margin``: the lead under which a batched choice is re-decided at batch 1; by default
    ``MARGIN`` for an fp32 decoder, and ``math.inf`` (every token re-decided: exact, slower)
    for other dtypes, whose batching error was not measured. ``probe``: also run every row at
    batch 1 and record the largest logit difference (doubles the cost; for measurements).
    The projection is always the full fp32 one (the bf16 screen of ``DecoderStep`` is
    batch-1 only).
    """

    def __init__(
        self, decoder: SpeculativeDecoder, *, margin: float | None = None, probe: bool = False
    ) -> None:
        self.decoder = decoder
        self.step = decoder.step
        self.spec = decoder.spec
        if margin is None:
            lean = self.step.lean
            fp32 = lean is not None and lean._embed.dtype == torch.float32
            margin = MARGIN if fp32 else math.inf
        self.margin = margin
        self.probe = probe

    def decode_batch(
        self,
        encs: Sequence[torch.Tensor],
        options: Sequence[DecodingOptions],
        drafters: Sequence[Drafter | None],
        durations: Sequence[float],
        guards: Sequence[LoopGuard | None] | None = None,
        draft_lengths: Sequence[DraftLength | None] | None = None,
    ) -> list[DecodeResult]:
        """``SpeculativeDecoder.decode`` of every row (``encs[i]``: ``(1, T_i, D)``)."""
        out = self.decode_batch_counted(encs, options, drafters, durations, guards, draft_lengths)
        return [r.result for r in out]

    @torch.inference_mode()
    def decode_batch_counted(
        self,
        encs: Sequence[torch.Tensor],
        options: Sequence[DecodingOptions],
        drafters: Sequence[Drafter | None],
        durations: Sequence[float],
        guards: Sequence[LoopGuard | None] | None = None,
        draft_lengths: Sequence[DraftLength | None] | None = None,
    ) -> list[BatchedResult]:
        """As ``decode_batch``, with each row's batching counters."""
        n = len(encs)
        guards = guards if guards is not None else [None] * n
        draft_lengths = draft_lengths if draft_lengths is not None else [None] * n
        if not n == len(options) == len(drafters) == len(durations) == len(guards):
            raise ValueError("one option, drafter and duration per encoder output")
        if len(draft_lengths) != n:
            raise ValueError("one draft length (or None) per encoder output")
        lean = self.step.lean
        if lean is None:  # no hand-run layers for this decoder: batch-1 decodes
            return [
                BatchedResult(self.decoder.decode(*a), BatchCounters())
                for a in zip(encs, options, drafters, durations, guards, draft_lengths, strict=True)
            ]
        t0 = time.perf_counter()
        spec = self.spec
        rows = [  # option errors surface before any work, as in batch 1
            _Row(lean.new_cache(), spec, enc, opts, drafter or NoDrafter(), dur, guard, dl)
            for enc, opts, drafter, dur, guard, dl in zip(
                encs, options, drafters, durations, guards, draft_lengths, strict=True
            )
        ]
        self._detect_languages(lean, [r for r in rows if r.detects])
        for r in rows:
            r.begin()
        active = list(rows)
        while active:
            self._pass(lean, active)
            for r in active:
                if not r.open:
                    r.decoder_s = time.perf_counter() - t0
            active = [r for r in active if r.open]
        return [self._result(r) for r in rows]

    def _detect_languages(self, lean: LeanDecoder, rows: list[_Row]) -> None:
        """``detect_language`` for every row in one pass; close calls again at batch 1."""
        if not rows:
            return
        step, spec = self.step, self.spec
        hidden = forward_packed(lean, [Segment([spec.sot], r.cache, r.enc) for r in rows])
        logits = project(step, torch.cat(hidden))
        no_speech = torch.softmax(logits, -1)[:, spec.no_speech].tolist()
        masks = step.not_language_mask
        assert masks is not None  # multilingual
        masked = logits.masked_fill(masks, -math.inf)
        choice = masked.argmax(-1).tolist()
        top_prob = torch.softmax(masked.float(), -1).max(-1).values.tolist()
        top2 = masked.topk(2, -1).values
        gaps = (top2[:, 0] - top2[:, 1]).tolist()
        for j, r in enumerate(rows):
            r.batch_rows += len(rows)
            r.choices += 1
            if self.probe:
                single = step.logits(lean.forward([spec.sot], twin_cache(lean, r.cache), r.enc))
                r.max_diff = max(r.max_diff, float((single[0] - logits[j]).abs().max()))
            if gaps[j] < self.margin:
                r.rechecked += 1
                r.recheck_tokens += 1
                token, lang_prob, prob = detect_language_prob(step, r.enc)
                r.changed += int(token != choice[j])
                r.detected(token, lang_prob, prob)
            else:
                r.detected(int(choice[j]), float(top_prob[j]), float(no_speech[j]))
            r.cache.crop(0)  # keep the cross-attention keys/values for the decode

    def _pass(self, lean: LeanDecoder, active: list[_Row]) -> None:
        """One loop iteration of every active row: drafts, one forward, verify, extend."""
        for r in active:
            r.next_draft()
            r.base = r.cache.length
        inputs = [r.pending + r.draft for r in active]
        hidden = forward_packed(
            lean, [Segment(t, r.cache, r.enc) for t, r in zip(inputs, active, strict=True)]
        )
        for r, h, t in zip(active, hidden, inputs, strict=True):
            r.hidden = h
            r.tokens += t
            r.batch_rows += len(active)
            if self.probe:
                r.shadow = r.shadow or twin_cache(lean, r.cache)
                r.shadow_hidden = lean.forward(t, r.shadow, r.enc)
        self._verify(lean, active)
        spec = self.spec
        for r in active:
            if r.sot_logits is not None:
                sot = r.sot_logits
                r.no_speech = math.exp(float(sot[spec.no_speech] - torch.logsumexp(sot, -1)))
                r.sot_logits = None
            new = r.settle(r.predicted).appended
            if new:
                logits = r.parts[0] if len(r.parts) == 1 else torch.cat(r.parts)
                r.add_logprobs(_lse_at(logits[: len(new)], new))
            if r.open:
                keep = r.cache.length - r.rejected
                for cache in (r.cache, r.exact, r.shadow):
                    if cache is not None:
                        cache.crop(keep)
                del r.tokens[keep:]

    def _verify(self, lean: LeanDecoder, active: list[_Row]) -> None:
        """Greedy choices of every row's verify rows, chunk by chunk, all rows projected
        together; a row stops being projected after its first disagreement with its draft."""
        step, eot = self.step, self.spec.eot
        for r in active:
            r.predicted, r.parts, r.verifying = [], [], True
        c0 = 0
        while True:
            group = [r for r in active if r.verifying and c0 < r.n_rows]
            if not group:
                return
            extras = [r for r in group if c0 == 0 and r.wants_no_speech]
            pieces = [r.hidden[r.sot_row : r.sot_row + 1] for r in extras]
            spans: list[tuple[_Row, int, int]] = []
            offset = 0
            for r in group:
                m = min(_VERIFY_CHUNK, r.n_rows - c0)
                pieces.append(r.hidden[r.row(c0) : r.row(c0) + m])
                spans.append((r, offset, m))
                offset += m
            logits = project(step, torch.cat(pieces))
            for j, r in enumerate(extras):
                r.sot_logits = logits[j]
            chosen = logits[len(extras) :]
            if self.probe:
                for r, off, m in spans:
                    rows = r.shadow_hidden[r.row(c0) : r.row(c0) + m]
                    diff = (step.logits(rows) - chosen[off : off + m]).abs().max()
                    r.max_diff = max(r.max_diff, float(diff))
            chosen.masked_fill_(step.suppress_mask, -math.inf)
            for r, off, _ in spans:
                if r.first and c0 == 0:
                    chosen[off].masked_fill_(step.begin_mask, -math.inf)
            choices = chosen.argmax(-1).tolist()
            top2 = chosen.topk(2, -1).values
            gaps = (top2[:, 0] - top2[:, 1]).tolist()
            for r, off, m in spans:
                used = m
                for j in range(m):
                    i = c0 + j
                    token = choices[off + j]
                    r.choices += 1
                    # (a choice after an accepted end-of-text draft is never used)
                    past_end = i > 0 and r.draft[i - 1] == eot
                    if gaps[off + j] < self.margin and not past_end:
                        token = self._recheck(lean, r, i, chosen[off + j])
                    r.predicted.append(token)
                    if i >= len(r.draft) or token != r.draft[i]:
                        r.verifying, used = False, j + 1
                        break
                r.parts.append(chosen[off : off + used])
            c0 += _VERIFY_CHUNK

    def _recheck(self, lean: LeanDecoder, r: _Row, i: int, logits: torch.Tensor) -> int:
        """The batch-1 greedy choice after verify row ``i`` of ``r``; its batch-1 logits
        replace ``logits`` (for the log-probabilities)."""
        step = self.step
        if r.exact is None:
            r.exact = twin_cache(lean, r.cache)
        pos = r.base + r.row(i)  # the cached position whose output chooses the token
        if r.exact.length > pos:
            r.exact.crop(pos)
        feed = r.tokens[r.exact.length : pos + 1]
        r.recheck_tokens += len(feed)
        single = step.logits(lean.forward(feed, r.exact, r.enc)[-1:])[0]
        single.masked_fill_(
            step.begin_mask if r.first and i == 0 else step.suppress_mask, -math.inf
        )
        token = int(single.argmax())
        r.rechecked += 1
        r.changed += int(token != int(logits.argmax()))
        logits.copy_(single)
        return token

    def _result(self, r: _Row) -> BatchedResult:
        counters = BatchCounters(
            batch_rows=r.batch_rows,
            choices=r.choices,
            rechecked=r.rechecked,
            changed=r.changed,
            recheck_tokens=r.recheck_tokens,
            max_logit_diff=r.max_diff if self.probe else math.nan,
        )
        return BatchedResult(r.result(r.decoder_s), counters)
