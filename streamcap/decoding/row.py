"""One decode's state and rules in the speculative loop: the part every loop shares.

A decode is a row: its options, forced prefix, token budget, loop guard, drafter and adaptive
draft length, what it has generated and what its next pass must feed. The batch-1 loop
(``speculative.py``) runs one row, the batched loop (``batched.py``) many in lockstep; each pass
of either is the same three steps of this class around the loop's own forward and verify:

1. ``next_draft``: the drafter's proposal, as long as K and the budget allow;
2. the loop feeds ``pending + draft`` and finds the greedy choice after each position
   (``predicted``, up to the first disagreement with the draft);
3. ``settle``: accept the agreeing drafts and the bonus token, adapt K, apply the stop rules
   token by token (``verify.extend``), and say how many cached positions the rejected drafts
   took (``rejected``: the loop crops them), with the bonus token as the next input.

Only how a pass runs differs between loops (one forward or a packed one, the screen or the
batched projection, re-decided close calls): the tokens, and so the result, are one
algorithm's. Language detection is the loop's too (one step, or one packed step); its outcome
goes through ``detected``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from streamcap.core.decode_types import DecodeResult, DecodeStats, DecodingOptions
from streamcap.decoding.drafters import Drafter
from streamcap.decoding.guard import LoopGuard
from streamcap.decoding.spec import WhisperSpec
from streamcap.decoding.verify import DraftLength, Extension, accept, extend


class DecodeRow:
    """The state of one decode between passes (see the module docstring).

    Option errors (an unknown language or task) raise here, before any work.
    """

    def __init__(
        self,
        spec: WhisperSpec,
        enc: torch.Tensor,
        options: DecodingOptions,
        drafter: Drafter,
        duration_s: float,
        guard: LoopGuard | None = None,
        draft_length: DraftLength | None = None,
    ) -> None:
        self.spec = spec
        self.enc = enc
        self.options = options
        self.drafter = drafter
        self.duration_s = duration_s
        self.guard = guard or LoopGuard(options.max_tokens_per_second, options.min_token_budget)
        # a free drafter (the previous hypothesis) may propose all it has at once
        free = bool(getattr(drafter, "free", False))
        self.k = draft_length or DraftLength(
            k=options.max_draft if free else options.initial_draft, k_max=options.max_draft
        )
        self.language_token: int | None = None
        if spec.multilingual and options.language is not None:
            self.language_token = spec.language_id(options.language)
        spec.prefix(self.language_token, options)
        self.language_prob: float | None = None  # when detected
        self.no_speech = math.nan
        self.prefix: list[int] = []
        self.budget = self.sot_row = 0
        self.generated: list[int] = []
        self.pending: list[int] = []  # tokens whose keys/values are not in the cache yet
        self.draft: list[int] = []  # this pass's draft
        self.first = True  # the next choice is the first generated token
        self.rejected = 0  # cached positions of this pass's rejected drafts
        self.stopped_by: str | None = None
        self.logprob_sum = 0.0
        self.drafted = self.accepted = self.forward_passes = 0

    @property
    def detects(self) -> bool:
        """Whether the loop must detect the language before ``begin``."""
        return self.spec.multilingual and self.language_token is None

    @property
    def open(self) -> bool:
        """Still decoding (no stop rule has fired)."""
        return self.stopped_by is None

    @property
    def wants_no_speech(self) -> bool:
        """This pass should also score <|sot|>'s row for the no-speech probability (the first
        pass, unless detection gave it)."""
        return self.first and math.isnan(self.no_speech)

    def detected(self, token: int, language_prob: float, no_speech: float) -> None:
        """The language detection's outcome (one forward pass)."""
        self.language_token, self.language_prob, self.no_speech = token, language_prob, no_speech
        self.forward_passes += 1

    def begin(self) -> None:
        """Fix the forced prefix and the budget; the first pass feeds the prefix."""
        spec = self.spec
        self.prefix = spec.prefix(self.language_token, self.options)
        self.budget = self.guard.token_budget(self.duration_s, spec.max_length - len(self.prefix))
        self.sot_row = self.prefix.index(spec.sot)
        self.drafter.begin(self.prefix)
        self.pending = list(self.prefix)

    def next_draft(self) -> list[int]:
        """This pass's draft (also kept as ``draft``); the loop feeds ``pending + draft``."""
        want = min(self.k.next_k(), self.budget - len(self.generated))
        self.draft = list(self.drafter.propose(self.generated, want))[:want] if want > 0 else []
        return self.draft

    def settle(self, predicted: Sequence[int]) -> Extension:
        """Apply this pass's greedy choices: ``predicted[i]`` follows ``pending[-1]`` when
        ``i == 0``, else ``draft[i - 1]``, up to the first disagreement with the draft.
        Returns the tokens appended (the loop adds their log-probabilities: ``add_logprobs``)
        and whether a stop rule fired; while open, ``rejected`` and ``pending`` are set for
        the next pass."""
        draft = self.draft
        n_ok, gained = accept(draft[: len(predicted) - 1], predicted)
        self.first = False
        self.forward_passes += 1
        self.drafted += len(draft)
        self.accepted += n_ok
        self.k.update(len(draft), n_ok)
        spec = self.spec
        ext = extend(self.generated, gained, eot=spec.eot, budget=self.budget, guard=self.guard)
        self.stopped_by = ext.stopped_by
        if ext.stopped_by is None:
            # the cache keeps pending + accepted drafts; the bonus token is next input
            self.rejected = len(draft) - n_ok
            self.pending = [gained[-1]]
        return ext

    def add_logprobs(self, values: Sequence[float]) -> None:
        """Log-probabilities of the tokens ``settle`` appended."""
        self.logprob_sum += sum(values)

    def result(self, decoder_s: float) -> DecodeResult:
        """The finished decode, ``decoder_s`` its time in the loop."""
        spec, generated = self.spec, self.generated
        stats = DecodeStats(
            drafted=self.drafted,
            accepted=self.accepted,
            forward_passes=self.forward_passes,
            decoder_s=decoder_s,
            tokens=len(generated),
        )
        token = self.language_token
        return DecodeResult(
            tokens=tuple(generated),
            text=spec.tokenizer.decode(generated, skip_special_tokens=True),
            language=spec.language_of(token) if token is not None else None,
            no_speech_prob=self.no_speech,
            avg_logprob=self.logprob_sum / len(generated) if generated else None,
            stopped_by=self.stopped_by or "eot",
            stats=stats,
            language_prob=self.language_prob,
        )
