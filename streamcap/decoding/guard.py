"""Loop guard: bound tokens per second of audio and stop n-gram repetition loops.

Greedy Whisper on hard audio can repeat a phrase until the 448-token limit (one such call cost
11 s here). The guard is a pure rule over token ids, applied identically to the reference
``generate`` path (as a stopping criterion) and to our own decoder, so exactness holds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["LoopGuard"]


@dataclass(frozen=True)
class LoopGuard:
    max_tokens_per_second: float = 12.0
    min_token_budget: int = 24
    max_ngram: int = 12  # longest repeated phrase (in tokens) we look for
    min_repeats: int = 3  # a phrase must repeat this many times in a row ...
    min_span: int = 16  # ... and the repeated run must cover this many tokens

    def token_budget(self, duration_s: float, hard_limit: int) -> int:
        """How many new tokens a window of ``duration_s`` seconds may produce."""
        budget = self.min_token_budget + math.ceil(self.max_tokens_per_second * duration_s)
        return max(1, min(hard_limit, budget))

    def is_loop(self, tokens: Sequence[int]) -> bool:
        """True when the sequence ends in a phrase repeated back to back too often."""
        n_tokens = len(tokens)
        for n in range(1, self.max_ngram + 1):
            repeats_needed = max(self.min_repeats, math.ceil(self.min_span / n))
            span = n * repeats_needed
            if span > n_tokens:
                continue
            tail = tokens[n_tokens - n :]
            if all(
                tokens[n_tokens - (r + 1) * n : n_tokens - r * n] == tail
                for r in range(1, repeats_needed)
            ):
                return True
        return False

    def loop_start(self, tokens: Sequence[int]) -> int:
        """Index where the repetition loop at the end begins (first copy kept)."""
        n_tokens = len(tokens)
        for n in range(1, self.max_ngram + 1):
            tail = list(tokens[n_tokens - n :])
            r = 1
            while (
                n_tokens - (r + 1) * n >= 0
                and list(tokens[n_tokens - (r + 1) * n : n_tokens - r * n]) == tail
            ):
                r += 1
            if r >= max(self.min_repeats, math.ceil(self.min_span / n)):
                return n_tokens - (r - 1) * n
        return n_tokens
