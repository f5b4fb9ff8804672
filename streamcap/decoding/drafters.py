"""Drafters propose the tokens the main model is likely to produce next.

A draft only changes speed, never output: the verifier keeps what the main model agrees with.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

__all__ = ["Drafter", "HypothesisDrafter", "ModelDrafter", "NoDrafter"]


class Drafter(Protocol):
    name: str

    def begin(self, prefix: Sequence[int]) -> None:
        """Start a new decode whose forced prefix is ``prefix``."""

    def propose(self, generated: Sequence[int], k: int) -> list[int]:
        """Up to ``k`` tokens expected to follow ``generated`` (may be empty)."""


class NoDrafter:
    """Plain greedy decoding through the same loop (the baseline)."""

    name = "none"

    def begin(self, prefix: Sequence[int]) -> None:
        pass

    def propose(self, generated: Sequence[int], k: int) -> list[int]:
        return []


class FixedDrafter:
    """Always proposes the same sequence, aligned by position (used by tests: wrong drafts)."""

    name = "fixed"

    def __init__(self, tokens: Sequence[int]) -> None:
        self.tokens = list(tokens)

    def begin(self, prefix: Sequence[int]) -> None:
        pass

    def propose(self, generated: Sequence[int], k: int) -> list[int]:
        return self.tokens[len(generated) : len(generated) + k]


class HypothesisDrafter:
    """The previous decode of the same growing utterance is the draft.

    While the new output follows the old hypothesis we propose its continuation. After a
    divergence (a word changed as more audio arrived) we re-synchronise: find the last few
    generated tokens in the old hypothesis, near where we expect them, and propose what
    followed them there, instead of giving up on the rest.
    """

    name = "hypothesis"
    free = True  # proposing costs nothing: no model runs

    def __init__(
        self, hypothesis: Sequence[int], eot: int | None = None, max_anchor: int = 3
    ) -> None:
        # ending the draft with end-of-text lets a window with no new speech finish in one pass
        self.hypothesis = list(hypothesis) + ([eot] if eot is not None else [])
        self.max_anchor = max_anchor
        self._cursor = 0  # index in hypothesis of the token expected next
        self._seen = 0  # len(generated) when the cursor was last valid
        self._aligned = True

    def begin(self, prefix: Sequence[int]) -> None:
        self._cursor = 0
        self._seen = 0
        self._aligned = True

    def _advance(self, generated: Sequence[int]) -> None:
        new = generated[self._seen :]
        if self._aligned:
            expected = self.hypothesis[self._cursor : self._cursor + len(new)]
            if list(new) == expected:
                self._cursor += len(new)
            else:
                self._aligned = False
        self._seen = len(generated)
        if not self._aligned:
            self._resync(generated)

    def _resync(self, generated: Sequence[int]) -> None:
        hyp = self.hypothesis
        for m in range(min(self.max_anchor, len(generated)), 0, -1):
            anchor = list(generated[-m:])
            best: int | None = None
            for j in range(len(hyp) - m + 1):
                # prefer the occurrence closest to where we are in the new output
                closer = best is None or abs(j + m - len(generated)) < abs(best - len(generated))
                if closer and hyp[j : j + m] == anchor:
                    best = j + m
            if best is not None and best < len(hyp):
                self._cursor = best
                self._aligned = True
                return

    def propose(self, generated: Sequence[int], k: int) -> list[int]:
        self._advance(generated)
        if not self._aligned:
            return []
        return self.hypothesis[self._cursor : self._cursor + k]


class ModelDrafter:
    """An assistant Whisper with the same tokenizer drafts greedily with its own KV cache.

    The decoder loop hands it the encoder output; when the assistant's encoder is the main
    one (distil-whisper), the caller passes the main encoder output and it is shared.
    """

    name = "model"

    def __init__(self, decoder_step: AssistantStep) -> None:
        self.step = decoder_step
        self._prefix: list[int] = []

    def begin(self, prefix: Sequence[int]) -> None:
        self._prefix = list(prefix)
        self.step.reset()

    def propose(self, generated: Sequence[int], k: int) -> list[int]:
        return self.step.draft([*self._prefix, *generated], k)


class AssistantStep(Protocol):
    """The model-facing half of ModelDrafter (lives in ``assistant.py``)."""

    def reset(self) -> None: ...

    def draft(self, context: list[int], k: int) -> list[int]: ...
