"""Greedy choices over Whisper's vocabulary without a full fp32 projection per step.

Projecting one decoder row onto the 51,865-token vocabulary reads the whole fp32 output matrix
(106 MB for base): ~5 ms on this CPU, the largest cost of a one-token step, and ~14 ms for the
8 rows of a verify pass. Greedy decoding only needs the argmax. So the rows are projected with
low-precision copies of the matrix (int8 for a few rows, bf16 for more: a quarter / half of the
memory, VNNI/AMX kernels), every approximate logit gets a rigorous error bound, and only the
tokens whose interval reaches the best lower bound are re-scored against the fp32 weights.
The returned choice is the fp32 argmax among those; the screen never decides it.
Log-probabilities (the hallucination guards read them) use fp32 logits too for the chosen
token and every token within ``_NEAR`` of the best; only the far tail of the softmax sum comes
from the approximation, and that error is bounded (``log_softmax_bounded``; derived below).

Error bound of an approximate logit ``a_r`` of row ``h`` against the fp32 logit ``z_r``
(``w`` the fp32 weight row, ``ŵ`` its low-precision copy, ``ĥ`` = bf16(h), K = 512 terms):

    |z_r - a_r| <= |w-ŵ|·|h| + |ŵ|·|h-ĥ| + 2^-8·|a_r| + 2γ_K·(|w|·|h| + |ŵ|·|ĥ|) [+ 2^-8·|ŵ|·|ĥ|]

(weight and activation rounding, bf16 rounding of the output, fp32 accumulation of the
approximation and of the fp32 reference itself, γ_K = K·2^-24; the bracket for the int8
kernel, in case it rounds dequantized weights to bf16). ``tests/decoding/test_screen.py``
checks it on real decoder states, where the observed error stays far inside it.

Error bound of a log-probability. Let ``top`` = max_r a_r, ``N`` = {r : a_r >= top - _NEAR}
(re-scored in fp32), ``F`` the far rest, ``b_r`` the bound above. ``log_softmax_at`` returns
``z_t - top - log Ŝ`` with

    Ŝ = Σ_N exp(z_r - top) + Σ_F exp(a_r - top),    S = Σ_all exp(z_r - top) (the fp32 sum).

The token's logit ``z_t`` and the near terms are fp32, so the whole error is ``log S - log Ŝ``,
and ``S - Ŝ = Σ_F exp(a_r - top)·(exp(z_r - a_r) - 1)``. With |z_r - a_r| <= b_r each factor
lies in [exp(-b_r) - 1, exp(b_r) - 1], so |S - Ŝ| <= E = Σ_F exp(a_r - top)·(exp(b_r) - 1)
(an under- or an over-estimate alike), hence S lies in [Ŝ - E, Ŝ + E] and

    |log-softmax_t(screen) - log-softmax_t(fp32)| <= -log(1 - E/Ŝ)    (infinite if E >= Ŝ)

for every token ``t`` of the row (log(1 + E/Ŝ) <= -log(1 - E/Ŝ) covers the other side), in
exact arithmetic. Both paths then round in fp32 (the logit's dot product summed in another
order than ``F.linear``'s, the log-sum-exp, the difference): the bound adds 8 fp32 ulps of
|z_t| + |log-sum-exp| (``_FP32_ULPS``; observed: about one, ~1e-6 at the magnitudes of real
rows). An average of log-probabilities (``avg_logprob``) is within the average of its tokens'
bounds; a probability p = exp(log-softmax) within min(bound, p·(exp(bound) - 1)) (the fp32
one is within a factor exp(±bound) of p, and both are <= 1). ``E`` is computed per token from
the real ``b_r`` (a few vector passes over the vocabulary, so only on request:
``log_softmax_bounded``; the decode loop's hot path takes ``log_softmax_at``, the same values).
Measured on real speech (``tests/decoding/test_decoding.py``, base): avg_logprob bounds of ~1e-2 to
5e-2 for int8 rows and ~2e-3 to 7e-3 for bf16 rows, against observed differences of 1e-6 to
2e-4: a worst case (every tail logit off by its whole bound, in the same direction), not an
estimate.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

_OUT_ROUND = 2.0**-8  # bf16 keeps 8 significant bits: rounding moves a value by <= 2^-8 of it
_SAFETY = 1.02  # relative slack for the fp32 arithmetic of the bound itself
_NEAR = 10.0  # logits this close to the best are re-scored in fp32 for log-probabilities
#: a log-probability's allowance for fp32 rounding, per unit of |logit| + |log-sum-exp|: 8 ulps
_FP32_ULPS = 8 * 2.0**-24
# some builds of torch's int8 kernel round each dequantized weight (q * scale) to bf16 before
# an AMX multiply: up to 2^-8 of it, so 2^-8·|ŵ|·|ĥ| more (``_int8_kernel_rounds`` probes)
_INT8_KERNEL_ROUND = 2.0**-8
_INT8_ROWS = 4  # up to this many rows the int8 kernel beats bf16 here (scripts/bench_kernels.py)


def _int8_kernel_rounds(n: int, k: int) -> bool:
    """Does ``_weight_int8pack_mm`` round dequantized weights to bf16 at this shape?

    Rows of q = (127, -1, 0...) with scale 1.5 against h = (1, 1, 0...): fp32 dequantization
    gives 190.5 - 1.5 = 189 exactly; bf16 dequantization rounds 190.5 to 190 and gives 188.5,
    stored as 188. Anything but 189 counts as rounding (the bound then includes it).
    """
    q = torch.zeros(n, k, dtype=torch.int8)
    q[:, 0], q[:, 1] = 127, -1
    scale = torch.full((n,), 1.5, dtype=torch.bfloat16)
    for m in range(1, _INT8_ROWS + 1):
        h = torch.zeros(m, k, dtype=torch.bfloat16)
        h[:, :2] = 1
        if not bool((torch._weight_int8pack_mm(h, q, scale).float() == 189.0).all()):
            return True
    return False


def cpu_info() -> tuple[str, set[str]]:
    """The CPU's model name and feature flags as Linux reports them ("" and empty elsewhere)."""
    name, flags = "", set[str]()
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("model name") and not name:
                    name = line.partition(":")[2].strip()
                elif line.startswith("flags") and not flags:
                    flags = set(line.partition(":")[2].split())
                if name and flags:
                    break
    except OSError:
        pass
    return name, flags


def cpu_bf16_native() -> bool:
    """oneDNN runs bf16 matmuls natively on this CPU (AVX512-BF16 or AMX); without it bf16 is
    emulated (slow, but exact at that precision)."""
    probe = getattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", None)
    try:
        return bool(probe()) if probe is not None else False
    except RuntimeError:
        return False


def screen_is_default() -> bool:
    """Whether a decoder step uses the screen when not told (``DecoderStep(screen=None)``): the
    one place of that rule. Today: where bf16 pays (``cpu_bf16_is_fast``); on other CPUs the
    screen's int8/bf16 matmuls were not measured faster than the fp32 projection."""
    return cpu_bf16_is_fast()


def cpu_bf16_is_fast() -> bool:
    """True when bf16 matmuls pay on this CPU: oneDNN runs them natively *and* the CPU has AMX.

    AVX512-BF16 alone is not enough: measured for base on 2 threads (one 30 s window, best of
    5), an Intel CPU with AVX512-BF16 and no AMX ran the encoder in 0.59 s at fp32 and 0.75 s
    in bf16 (issue 22); with AMX the bf16 encoder took 0.29 s against 0.71 s. The same gate
    holds for the bf16 vocabulary screen until `auto` is chosen by measurement.
    """
    return cpu_bf16_native() and "amx_bf16" in cpu_info()[1]


class ScreenedProjection:
    """Exact greedy argmax of ``weight @ h`` from a bounded low-precision screen.

    ``int8_rows``: calls over up to this many rows use the int8 kernel (where torch has it),
    more rows the bf16 one (``kernel``); 0 forces bf16 everywhere, a large value int8.
    """

    def __init__(self, weight: torch.Tensor, *, int8_rows: int = _INT8_ROWS) -> None:
        w = weight.detach().float()
        self.int8_rows = int8_rows
        self.weight = weight.detach()
        k = w.shape[1]
        self.gamma = 2.0 * k * 2.0**-24
        self.w_norm = w.norm(dim=1)
        # several rows: bf16 copy, stored (K, V) so the matmul needs no transpose
        wb = w.to(torch.bfloat16)
        self.wb_t = wb.t().contiguous()
        wb32 = wb.float()
        self.wb_err = (w - wb32).norm(dim=1)
        self.wb_norm = wb32.norm(dim=1)
        del wb, wb32
        # a few rows: int8 per-row with a bf16 scale (weight-only int8 kernel), if torch has it
        self.wq: torch.Tensor | None = None
        if hasattr(torch, "_weight_int8pack_mm"):
            scale = (w.abs().amax(dim=1) / 127.0).clamp_min(1e-12).to(torch.bfloat16)
            q = torch.round(w / scale.float()[:, None]).clamp(-127, 127)
            try:  # the probe runs the kernel at this shape: a build without it raises here
                rounds = _int8_kernel_rounds(*w.shape)
            except RuntimeError:
                pass
            else:
                wq32 = q * scale.float()[:, None]
                self.wq = q.to(torch.int8)
                self.wq_scale = scale
                self.wq_err = (w - wq32).norm(dim=1)
                self.wq_norm = wq32.norm(dim=1)
                self.wq_round = _INT8_KERNEL_ROUND if rounds else 0.0
                del wq32
            del q

    def kernel(self, n_rows: int) -> str:
        """The kernel that approximates a call over ``n_rows`` rows: ``"int8"`` or ``"bf16"``."""
        return "int8" if n_rows <= self.int8_rows and self.wq is not None else "bf16"

    def approximate(self, rows: torch.Tensor) -> tuple[torch.Tensor, _RowBounds]:
        """Approximate fp32 logits (M, V) and what their error bounds are made of."""
        hb = rows.float().to(torch.bfloat16)
        kernel = self.kernel(rows.shape[0])
        if kernel == "int8":
            assert self.wq is not None
            approx = torch._weight_int8pack_mm(hb, self.wq, self.wq_scale).float()
        else:
            approx = (hb @ self.wb_t).float()
        return approx, self.bounds(rows, kernel)

    def bounds(self, rows: torch.Tensor, kernel: str) -> _RowBounds:
        """What the error bounds of ``kernel``'s approximate logits of ``rows`` are made of."""
        h = rows.float()
        hb32 = h.to(torch.bfloat16).float()
        h_norm, hb_norm, h_err = h.norm(dim=1), hb32.norm(dim=1), (h - hb32).norm(dim=1)
        if kernel == "int8":
            w_err, w_norm, rounding = self.wq_err, self.wq_norm, self.wq_round
        else:
            w_err, w_norm, rounding = self.wb_err, self.wb_norm, 0.0
        return _RowBounds(self, w_err, w_norm, h_norm, hb_norm, h_err, rounding)

    def choose(
        self, rows: torch.Tensor, banned: Sequence[torch.Tensor | None], skip: int = 0
    ) -> tuple[torch.Tensor, list[int], list[int]]:
        """Approximate logits (banned tokens at -inf), fp32 argmax per row, candidates per row.

        ``banned[i]`` is a boolean mask over the vocabulary for row ``i`` (suppress rules).
        The first ``skip`` rows only get approximate logits (no choice).
        """
        approx, bounds = self.approximate(rows)
        choices: list[int] = []
        sizes: list[int] = []
        for i in range(skip, rows.shape[0]):
            a = approx[i]
            mask = banned[i]
            if mask is not None:
                a.masked_fill_(mask, -math.inf)
            top = float(a.max())
            # every bound is <= cap, so a token below top - 2 cap cannot reach the best
            # lower bound; the per-token bounds are computed only for the few above it
            near = torch.nonzero(a >= top - 2.0 * bounds.cap(i, top)).flatten()
            a_near = a[near]
            b_near = bounds.of(i, near, a_near)
            cand = near[a_near + b_near >= float((a_near - b_near).max())]
            if cand.numel() == 1:
                choices.append(int(cand[0]))
            else:
                exact = torch.nn.functional.linear(rows[i : i + 1], self.weight[cand])[0]
                choices.append(int(cand[int(exact.argmax())]))
            sizes.append(int(cand.numel()))
        return approx, choices, sizes

    def _sums(self, rows: torch.Tensor, approx: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Per row: the shift ``top``, the sum Ŝ of exp(logit - top) with the near terms in fp32
        (module docstring), and the approximate terms exp(a - top) of every token."""
        w = self.weight
        x = rows.to(w.dtype)
        top = approx.amax(1, keepdim=True)
        terms = (approx - top).exp_()
        r, t = torch.nonzero(approx >= top - _NEAR, as_tuple=True)
        shift = top[:, 0]
        # the sum of exp(logit - top), with the near terms swapped for their fp32 values
        swap = ((x[r] * w[t]).sum(-1) - shift[r]).exp_() - terms[r, t]
        return shift, terms.sum(1).index_add_(0, r, swap), terms

    def log_softmax_at(
        self, rows: torch.Tensor, approx: torch.Tensor, tokens: list[int]
    ) -> list[float]:
        """log-softmax of each row's logits at its token (``approx``: the rows' approximate
        logits, banned tokens at -inf): fp32 logits for the tokens and for every token within
        ``_NEAR`` of the row's best, the approximation only for the far tail of the sum."""
        shift, sums, _ = self._sums(rows, approx)
        logit, lse = self._at(rows, tokens, shift, sums)
        return (logit - lse).tolist()

    def _at(
        self, rows: torch.Tensor, tokens: list[int], shift: torch.Tensor, sums: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The fp32 logit of each row's token and the row's log-sum-exp ``shift + log(sums)``."""
        w = self.weight
        return (rows.to(w.dtype) * w[tokens]).sum(-1), shift + sums.log()

    def log_softmax_bounded(
        self, rows: torch.Tensor, approx: torch.Tensor, tokens: list[int], kernels: Sequence[str]
    ) -> tuple[list[float], list[float]]:
        """``log_softmax_at`` and, per row, a bound on its distance from the fp32 log-softmax
        at any token: -log(1 - E/Ŝ) (module docstring). ``kernels[i]``: the kernel that gave
        ``approx[i]`` (``kernel`` of the call that approximated it)."""
        shift, sums, terms = self._sums(rows, approx)
        logit, lse = self._at(rows, tokens, shift, sums)
        values = (logit - lse).tolist()
        # the two paths' own fp32 rounding of logit - lse (module docstring)
        rounding = (_FP32_ULPS * (logit.abs() + lse.abs())).tolist()
        # the far tokens (the rest are fp32); a banned or underflowed term is exactly 0
        far = (approx < shift[:, None] - _NEAR) & (terms > 0)
        bounds: list[float] = []
        for i, kernel in enumerate(kernels):
            a, s_hat = approx[i], float(sums[i])
            b = self.bounds(rows[i : i + 1], kernel).of(0, slice(None), a)  # inf where banned
            err = _SAFETY * float(torch.where(far[i], terms[i] * b.expm1_(), 0.0).sum())
            tail = -math.log1p(-err / s_hat) if err < s_hat else math.inf
            bounds.append(tail + rounding[i])
        return values, bounds


class _RowBounds:
    """Error bounds of the approximate logits of a set of rows, computed on demand."""

    def __init__(
        self,
        proj: ScreenedProjection,
        w_err: torch.Tensor,
        w_norm: torch.Tensor,
        h_norm: torch.Tensor,
        hb_norm: torch.Tensor,
        h_err: torch.Tensor,
        kernel_round: float,
    ) -> None:
        self.p, self.w_err, self.w_norm = proj, w_err, w_norm
        self.g = proj.gamma + kernel_round  # per |ŵ|·|ĥ|: fp32 accumulation, kernel rounding
        self.h_norm: list[float] = h_norm.tolist()
        self.hb_norm: list[float] = hb_norm.tolist()
        self.h_err: list[float] = h_err.tolist()
        self.max_w_err = float(w_err.max())
        self.max_w_norm = float(w_norm.max())
        self.max_w32_norm = float(proj.w_norm.max())

    def of(self, i: int, tokens: torch.Tensor | slice, approx: torch.Tensor) -> torch.Tensor:
        """Bounds of row ``i``'s approximate logits ``approx`` of ``tokens`` (a slice: all)."""
        bound = approx.abs() * _OUT_ROUND
        bound += self.w_err[tokens] * self.h_norm[i]
        bound += self.w_norm[tokens] * (self.h_err[i] + self.g * self.hb_norm[i])
        bound += self.p.w_norm[tokens] * (self.p.gamma * self.h_norm[i])
        return bound * _SAFETY

    def cap(self, i: int, top: float) -> float:
        """A bound on every token's bound, for tokens whose logit lies within 2 caps of ``top``.

        For those ``|a| <= |top| + 2 cap``, so ``cap = 2^-8 (|top| + 2 cap) + rest`` solves to
        the expression below.
        """
        rest = (
            self.max_w_err * self.h_norm[i]
            + self.max_w_norm * (self.h_err[i] + self.g * self.hb_norm[i])
            + self.max_w32_norm * self.p.gamma * self.h_norm[i]
        )
        return _SAFETY * (_OUT_ROUND * abs(top) + rest) / (1.0 - 2.0 * _SAFETY * _OUT_ROUND)
