"""The bounded int8/bf16 screen returns exactly the fp32 greedy argmax.

Real decoder states of the bundled base model on real speech, plus adversarial near-ties
constructed so that the low-precision logits alone would pick the wrong token.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch

from streamcap.core.decode_types import DecodingOptions
from streamcap.decoding.screen import ScreenedProjection


@pytest.fixture(autouse=True)
def _inference() -> object:
    with torch.inference_mode():
        yield


@torch.inference_mode()
def _rows(engine, speech, clips: list[str]) -> torch.Tensor:
    rows = []
    for clip in clips:
        enc = engine.encode(speech[clip])
        opts = DecodingOptions(language="en")
        result = engine.decode(enc, opts, drafter="none")
        tokens = engine.spec.prefix(engine.spec.language_id("en"), opts) + list(result.tokens)
        step = engine.decoder.step
        rows.append(step.forward(tokens, step.new_cache(), enc.enc))
    return torch.cat(rows)


@pytest.fixture(scope="module")
def states(engine, speech) -> torch.Tensor:
    return _rows(engine, speech, ["en_real_jfk", "en_real_forever", "en_real_librivox_0870"])


def test_error_bounds_hold_on_real_decoder_states(engine, states):
    weight = engine.decoder.step.proj_out.weight
    screen = ScreenedProjection(weight)
    exact = torch.nn.functional.linear(states, weight)
    vocab = torch.arange(exact.shape[1])
    for m in (1, 3, 8):  # int8 for a few rows, bf16 for more
        for i in range(0, states.shape[0] - m, m):
            approx, bounds = screen.approximate(states[i : i + m])
            for j in range(m):
                err = (exact[i + j] - approx[j]).abs()
                bound = bounds.of(j, vocab, approx[j])
                assert bool((err <= bound).all()), f"bound broken at row {i + j}"
                # rigorous (worst case) yet not vacuous: within ~25x of the observed error
                assert float(bound.max()) < 25 * float(err.max()) + 1.0


@pytest.fixture(scope="module")
def projection(engine) -> ScreenedProjection:
    projection = ScreenedProjection(engine.decoder.step.proj_out.weight)
    assert projection.wq is not None  # torch has the int8 kernel: its path runs here
    return projection


def _split(projection: ScreenedProjection, int8_rows: int) -> ScreenedProjection:
    """``projection`` with its int8/bf16 split forced (the weight copies shared)."""
    forced = copy.copy(projection)
    forced.int8_rows = int8_rows
    return forced


@pytest.mark.parametrize("int8_rows", [0, 4, 16])  # bf16 only, the default split, int8 only
def test_choices_equal_the_fp32_argmax_with_suppress_rules(engine, states, projection, int8_rows):
    dec = engine.decoder.step
    screen = _split(projection, int8_rows)
    exact = torch.nn.functional.linear(states, dec.proj_out.weight)
    all_sizes: list[int] = []
    for m in (1, 2, 8):
        for i in range(0, states.shape[0] - m, m):
            banned = [dec.begin_mask if j == 0 else dec.suppress_mask for j in range(m)]
            _, choices, sizes = screen.choose(states[i : i + m], banned)
            want = exact[i : i + m].clone()
            for j in range(m):
                want[j].masked_fill_(banned[j], -math.inf)
            assert choices == want.argmax(-1).tolist()
            assert min(sizes) >= 1
            all_sizes += sizes
    # the bounds are rigorous, hence wide on rare high-norm rows, yet few tokens are re-scored
    assert sum(all_sizes) / len(all_sizes) < 200


def _check_log_softmax_bound(proj, rows, exact, banned, tokens_of) -> list[float]:
    """``log_softmax_bounded`` against the fp32 log-softmax of ``exact`` (suppressed tokens
    at -inf): every value within its row's bound; the bounds and the observed errors back."""
    m = rows.shape[0]
    approx, choices, _ = proj.choose(rows, [banned] * m)
    kernel = proj.kernel(m)
    want = torch.log_softmax(exact if banned is None else exact.masked_fill(banned, -math.inf), -1)
    sets = tokens_of(choices, want)  # one call: each row once per token set
    tokens = [t for ts in sets for t in ts]
    n = len(sets)
    got, bounds = proj.log_softmax_bounded(
        rows.repeat(n, 1), approx.repeat(n, 1), tokens, [kernel] * (n * m)
    )
    out = []
    for j, t in enumerate(tokens):
        err = abs(got[j] - float(want[j % m, t]))
        assert err <= bounds[j] < math.inf, (kernel, j, err, bounds[j])
        out.append((err, bounds[j]))
    return out


def _best_and_worst(choices, want):
    """Each row's chosen token (near the top) and its least likely allowed one (far)."""
    return [choices, want.masked_fill(want.isinf(), math.inf).argmin(-1).tolist()]


@pytest.mark.parametrize(("kernel", "m"), [("int8", 1), ("int8", 4), ("bf16", 8)])
def test_log_softmax_bound_holds_on_real_decoder_states(engine, states, projection, kernel, m):
    """The derived bound (screen.py) on each log-probability holds, for either kernel, on real
    decoder states: the chosen token and the least likely one, with the suppress rules."""
    proj = _split(projection, 16 if kernel == "int8" else 0)
    assert proj.kernel(m) == kernel
    dec = engine.decoder.step
    exact = torch.nn.functional.linear(states, dec.proj_out.weight)
    seen = []
    for i in range(0, states.shape[0] - m, 2 * m):  # every other call's rows: enough, cheaper
        rows = states[i : i + m]
        seen += _check_log_softmax_bound(
            proj, rows, exact[i : i + m], dec.suppress_mask, _best_and_worst
        )
    errs, bounds = zip(*seen, strict=True)
    # a worst case, yet not vacuous (base here: ~1e-2 int8, ~2e-3 bf16 on average; int8 more
    # where its kernel rounds dequantized weights to bf16)
    assert sum(bounds) / len(bounds) < (0.5 if kernel == "int8" else 0.02)
    assert max(errs) < 1e-3


def test_log_softmax_bound_holds_with_a_heavy_far_tail():
    """Flat-ish softmaxes put real mass beyond ``_NEAR`` of the best, where the approximation
    enters the sum: the bound still holds (random weights and rows at several scales)."""
    gen = torch.Generator().manual_seed(3)
    weight = torch.randn(3000, 256, generator=gen) * 0.1
    projection = ScreenedProjection(weight)
    for scale in (3.0, 10.0, 30.0):
        rows = torch.randn(8, 256, generator=gen) * scale
        exact = torch.nn.functional.linear(rows, weight)
        for int8_rows, m in ((16, 2), (0, 8)):
            proj = _split(projection, int8_rows)
            seen = _check_log_softmax_bound(proj, rows[:m], exact[:m], None, _best_and_worst)
            assert max(b for _, b in seen) > 0  # a far tail: the bound has work to do


def test_near_ties_are_decided_in_fp32():
    """Rows that differ below bf16/int8 resolution: only the fp32 re-score can tell them
    apart, so a screen that trusted its approximation would pick the wrong one."""
    gen = torch.Generator().manual_seed(0)
    weight = torch.randn(4000, 512, generator=gen) * 0.05
    h = torch.randn(1, 512, generator=gen) * 20
    best = int(torch.nn.functional.linear(h, weight).argmax())
    flips = 0
    for trial in range(40):
        w = weight.clone()
        # a rival row a hair above the best in fp32, identical at low precision
        rival = (best + 1 + trial) % w.shape[0]
        w[rival] = w[best]
        k = int(h[0].abs().argmax())
        w[rival, k] += math.copysign(1e-5 * (trial + 1), float(h[0, k]))
        want = int(torch.nn.functional.linear(h, w).argmax())
        assert want == rival  # the rival really wins in fp32
        screen = ScreenedProjection(w)
        for rows in (h, h.repeat(8, 1)):
            approx, choices, sizes = screen.choose(rows, [None] * rows.shape[0])
            assert set(choices) == {want} and min(sizes) >= 2
            flips += int(approx[0].argmax()) != want
    assert flips > 0  # the approximation alone does get these wrong


def test_random_matrices_and_scales():
    gen = torch.Generator().manual_seed(1)
    for scale in (0.01, 1.0, 30.0):
        weight = torch.randn(3000, 256, generator=gen) * 0.1
        screen = ScreenedProjection(weight)
        rows = torch.randn(12, 256, generator=gen) * scale
        _, choices, _ = screen.choose(rows, [None] * 12)
        assert choices == torch.nn.functional.linear(rows, weight).argmax(-1).tolist()


def test_int8_kernel_probe_matches_the_kernel():
    """The int8 bound leaves out weight rounding only when the probe says the kernel
    dequantizes in fp32; then its results must sit within output rounding and fp32
    accumulation of the fp32-dequantized products, on random data of the real shape."""
    from streamcap.decoding.screen import _int8_kernel_rounds

    gen = torch.Generator().manual_seed(2)
    n, k = 51865, 512
    q = torch.randint(-127, 128, (n, k), generator=gen, dtype=torch.int8)
    scale = (torch.rand(n, generator=gen) * 0.01 + 1e-3).to(torch.bfloat16)
    rounds = _int8_kernel_rounds(n, k)
    for m in (1, 2, 4):
        h = (torch.randn(m, k, generator=gen) * 10).to(torch.bfloat16)
        got = torch._weight_int8pack_mm(h, q, scale).double()
        w = q.double() * scale.double()[:, None]
        want = h.double() @ w.t()
        slack = 2.0**-8 * got.abs() + 2 * k * 2.0**-24 * (h.double().abs() @ w.abs().t())
        if rounds:
            slack += 2.0**-8 * (h.double().abs() @ w.abs().t())
        assert bool(((got - want).abs() <= slack * 1.01).all())
