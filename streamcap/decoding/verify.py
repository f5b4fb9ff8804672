"""The verify/accept step of speculative decoding, as pure logic over token ids.

The main model scores ``pending + draft`` in one forward pass; ``predicted[i]`` is its greedy
choice after input position ``i``. A draft token is accepted while it equals the main model's
own choice, and the main model's next token is always gained on top. Applying the stop rules
token by token afterwards makes the result identical to one-token-at-a-time greedy decoding.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from streamcap.decoding.guard import LoopGuard


def accept(draft: Sequence[int], predicted: Sequence[int]) -> tuple[int, list[int]]:
    """Return (accepted draft count, tokens gained), ``predicted`` aligned with the draft.

    ``predicted`` holds ``len(draft) + 1`` greedy tokens: the choice before the first draft
    token, after it, and so on.
    """
    if len(predicted) != len(draft) + 1:
        raise ValueError("predicted must have one more entry than draft")
    n = 0
    while n < len(draft) and draft[n] == predicted[n]:
        n += 1
    return n, [*draft[:n], predicted[n]]


@dataclass(frozen=True)
class Extension:
    """Outcome of appending gained tokens under the stop rules."""

    appended: tuple[int, ...]
    stopped_by: str | None  # None: keep decoding


def extend(
    generated: list[int],
    gained: Sequence[int],
    *,
    eot: int,
    budget: int,
    guard: LoopGuard,
) -> Extension:
    """Append ``gained`` to ``generated`` one by one, stopping exactly where greedy would.

    End-of-text is not appended (results carry text tokens only), matching how ``generate``
    output is compared after stripping it.
    """
    appended: list[int] = []
    for token in gained:
        if token == eot:
            return Extension(tuple(appended), "eot")
        generated.append(token)
        appended.append(token)
        if guard.is_loop(generated):
            return Extension(tuple(appended), "loop")
        if len(generated) >= budget:
            return Extension(tuple(appended), "max_tokens")
    return Extension(tuple(appended), None)


@dataclass
class DraftLength:
    """Adaptive K, and whether drafting pays at all.

    K grows after a fully accepted draft and shrinks after an early rejection. When recent
    acceptance (exponentially weighted, by tokens) falls under ``min_rate`` the drafter is
    switched off; a small probe draft every ``probe_every`` passes lets it earn its way back.
    Keep one per stream to carry what was learnt across decodes.
    """

    k: int = 8
    k_min: int = 2
    k_max: int = 24
    min_rate: float = 0.1
    min_evidence: float = 12.0  # drafted tokens seen before the drafter can be switched off
    probe_every: int = 16
    decay: float = 0.9
    drafted_ewma: float = 0.0
    accepted_ewma: float = 0.0
    enabled: bool = True
    _since_probe: int = 0

    @property
    def rate(self) -> float:
        return self.accepted_ewma / self.drafted_ewma if self.drafted_ewma else 1.0

    def next_k(self) -> int:
        """How many tokens to draft on this pass (0: drafting is off for now)."""
        if self.enabled:
            return self.k
        self._since_probe += 1
        if self._since_probe >= self.probe_every:
            self._since_probe = 0
            return self.k_min
        return 0

    def update(self, drafted: int, accepted: int) -> None:
        if drafted == 0:
            return
        self.drafted_ewma = self.decay * self.drafted_ewma + drafted
        self.accepted_ewma = self.decay * self.accepted_ewma + accepted
        if accepted == drafted:
            self.k = min(self.k_max, self.k * 2)
        elif accepted < drafted // 2:
            self.k = max(self.k_min, self.k // 2)
        if self.drafted_ewma >= self.min_evidence or not self.enabled:
            self.enabled = self.rate >= self.min_rate
