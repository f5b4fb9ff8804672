"""The verify/accept step and the loop guard, as pure logic driven by a tiny fake model."""

from __future__ import annotations

import random

from streamcap.decoding.drafters import FixedDrafter, HypothesisDrafter, NoDrafter
from streamcap.decoding.guard import LoopGuard
from streamcap.decoding.verify import DraftLength, accept, extend

EOT = 0


def fake_model(context: list[int]) -> int:
    """A deterministic 'language model': the next token is a hash of the last three."""
    if len(context) >= 30:
        return EOT
    return 1 + (sum(context[-3:]) * 7 + len(context)) % 50


def greedy(limit: int, guard: LoopGuard) -> list[int]:
    out: list[int] = []
    ext = extend(out, [fake_model([])], eot=EOT, budget=limit, guard=guard)
    while ext.stopped_by is None:
        ext = extend(out, [fake_model(out)], eot=EOT, budget=limit, guard=guard)
    return out


def speculative(drafter, limit: int, guard: LoopGuard) -> tuple[list[int], int]:
    """The decoder loop of speculative.py with the fake model in place of Whisper."""
    out: list[int] = []
    passes = 0
    k = DraftLength()
    drafter.begin([])
    while True:
        draft = drafter.propose(out, k.k)
        # one 'forward pass' scores every position of the draft at once
        predicted = [fake_model(out + draft[:i]) for i in range(len(draft) + 1)]
        passes += 1
        n, gained = accept(draft, predicted)
        k.update(len(draft), n)
        ext = extend(out, gained, eot=EOT, budget=limit, guard=guard)
        if ext.stopped_by:
            return out, passes


def test_accept_takes_matching_prefix_plus_one():
    assert accept([5, 6, 7], [5, 6, 9, 4]) == (2, [5, 6, 9])
    assert accept([], [3]) == (0, [3])
    assert accept([1, 2], [1, 2, 3]) == (2, [1, 2, 3])
    assert accept([8], [1, 2]) == (0, [1])


def test_accept_rejects_misaligned_predictions():
    import pytest

    with pytest.raises(ValueError):
        accept([1, 2], [1, 2])


def test_speculative_equals_greedy_for_any_draft():
    guard = LoopGuard()
    ref = greedy(200, guard)
    rng = random.Random(0)
    drafters = [
        NoDrafter(),
        HypothesisDrafter(ref, eot=EOT),
        HypothesisDrafter(ref[:10]),
        HypothesisDrafter(ref[5:]),
        FixedDrafter([rng.randrange(1, 51) for _ in range(60)]),
    ]
    for _ in range(20):
        noisy = [t if rng.random() > 0.2 else rng.randrange(1, 51) for t in ref]
        drafters.append(HypothesisDrafter(noisy, eot=EOT))
    for drafter in drafters:
        out, _ = speculative(drafter, 200, guard)
        assert out == ref, drafter.name
    _, perfect_passes = speculative(HypothesisDrafter(ref, eot=EOT), 200, guard)
    _, plain_passes = speculative(NoDrafter(), 200, guard)
    assert plain_passes == len(ref) + 1
    assert perfect_passes <= 3


def test_extend_stops_at_eot_budget_and_loop():
    guard = LoopGuard(min_repeats=3, min_span=6)
    out: list[int] = []
    assert extend(out, [4, 5, EOT, 6], eot=EOT, budget=10, guard=guard).stopped_by == "eot"
    assert out == [4, 5]
    out = []
    ext = extend(out, [1, 2, 3, 4, 5], eot=EOT, budget=3, guard=guard)
    assert ext.stopped_by == "max_tokens" and out == [1, 2, 3]
    out = []
    ext = extend(out, [7, 8] * 10, eot=EOT, budget=100, guard=guard)
    assert ext.stopped_by == "loop" and out == [7, 8] * 3


def test_loop_guard_detects_repetition_not_speech():
    guard = LoopGuard()
    phrase = [11, 12, 13, 14, 15]
    assert guard.is_loop([1, 2, 3] + phrase * 4)
    assert not guard.is_loop([1, 2, 3] + phrase * 2)  # "thank you thank you" is fine
    assert guard.is_loop([9] * 16) and not guard.is_loop([9] * 15)
    assert guard.loop_start([1, 2] + phrase * 4) == 7  # keep one copy
    assert guard.loop_start([1, 2, 3]) == 3
    assert guard.token_budget(10.0, 400) == 24 + 120
    assert guard.token_budget(100.0, 400) == 400


def test_hypothesis_drafter_resynchronises_after_divergence():
    old = [10, 11, 12, 13, 14, 15, 16, 17]
    d = HypothesisDrafter(old)
    d.begin([])
    assert d.propose([], 3) == [10, 11, 12]
    # the new output changed one word (12 -> 99) and then went back to the old text
    assert d.propose([10, 11, 99], 3) == []  # no anchor yet: 99 is new
    assert d.propose([10, 11, 99, 13], 3) == [14, 15, 16]  # re-synchronised on 13
    assert d.propose([10, 11, 99, 13, 14, 15], 4) == [16, 17]
    # an insertion (77 before 13): the anchor 13 re-syncs
    d.begin([])
    assert d.propose([10, 11, 12, 77], 2) == []
    assert d.propose([10, 11, 12, 77, 13], 2) == [14, 15]
    # past the end of the old text there is nothing to propose
    d.begin([])
    assert d.propose([*old, 50, 51], 3) == []


def test_draft_length_adapts():
    k = DraftLength(k=8, k_min=2, k_max=24)
    k.update(8, 8)
    assert k.k == 16
    k.update(16, 16)
    assert k.k == 24
    k.update(24, 1)
    assert k.k == 12
    k.update(0, 0)
    assert k.k == 12


def test_drafter_that_does_not_pay_is_switched_off_and_probed():
    k = DraftLength(k=8, probe_every=4)
    for _ in range(10):
        k.update(k.next_k(), 0)
    assert not k.enabled
    ks = [k.next_k() for _ in range(8)]
    assert ks.count(0) == 6 and ks.count(k.k_min) == 2  # rare small probes
    for _ in range(12):  # the drafter starts paying again: probes re-enable it
        k.update(4, 4)
    assert k.enabled and k.next_k() > k.k_min


def test_switched_off_drafter_still_gives_exact_output():
    guard = LoopGuard()
    ref = greedy(200, guard)
    wrong = FixedDrafter([(t % 50) + 1 for t in ref])  # always off by one
    out, passes = speculative(wrong, 200, guard)
    assert out == ref
