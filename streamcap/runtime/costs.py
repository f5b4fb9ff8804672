"""The worker's cost model: what a batch of each size costs, as measured on this machine.

The worker batches when several jobs wait: their decoder steps run in lockstep as one batch
(weights are read once per step for every row), and partials' windows of the same encoder
context can go through the encoder in one call. Whether that pays depends on the machine (a
2-core CPU is compute-bound in the encoder, memory-bound in a decoder step; a GPU is neither
at batch 1), so the worker measures instead of assuming: every batched call reports its batch
size and seconds here, and the model keeps an exponentially weighted mean per size.

`decoder_batch` picks the size with the least time per row among those whose step is at most
`max_slowdown` x a single row's (a batch's rows each wait for the batch's steps: a batch much
slower than one row would delay a final more than it saves). Sizes not measured yet are
estimated from the measured ones (interpolated; beyond the largest measured, the trend a
little optimistically), so each is tried and then judged by what it really cost. Pure
logic: no clock, no model.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CostModel", "CostModelConfig"]


@dataclass(frozen=True)
class CostModelConfig:
    max_batch: int = 8
    #: weight of a new measurement in the running mean
    alpha: float = 0.2
    #: a batched step may take at most this many single steps' time
    max_slowdown: float = 3.0
    #: an unmeasured size is estimated this much cheaper than the trend, so it gets tried
    optimism: float = 0.9
    #: a batched encoder call must save at least this share against one call per window
    min_encoder_saving: float = 0.05


class CostModel:
    """Running mean cost per batch size of a decoder step and of an encoder call (per encoder
    context); not thread-safe (the worker's thread owns it)."""

    def __init__(self, config: CostModelConfig | None = None) -> None:
        self.config = config or CostModelConfig()
        self._step: dict[int, float] = {}
        self._encode: dict[tuple[int, int], float] = {}  # (positions, batch) -> seconds
        self.batches: dict[int, int] = {}  # decoder batches run, by size

    # ------------------------------------------------------------------ measurements

    def observe_step(self, batch: int, seconds: float) -> None:
        self._step[batch] = self._mean(self._step.get(batch), seconds)

    def observe_batch(self, batch: int) -> None:
        self.batches[batch] = self.batches.get(batch, 0) + 1

    def observe_encode(self, positions: int, batch: int, seconds: float) -> None:
        key = (positions, batch)
        self._encode[key] = self._mean(self._encode.get(key), seconds)

    def _mean(self, old: float | None, new: float) -> float:
        return new if old is None else old + self.config.alpha * (new - old)

    # ------------------------------------------------------------------ estimates

    @staticmethod
    def _estimate(measured: dict[int, float], batch: int, optimism: float) -> float | None:
        if batch in measured:
            return measured[batch]
        if not measured:
            return None
        sizes = sorted(measured)
        if len(sizes) == 1:  # one point: assume the cost grows with the rows, optimistically
            b0 = sizes[0]
            return optimism * measured[b0] * batch / b0
        if batch > sizes[-1]:  # beyond what was measured: the trend, a little optimistic
            lo, hi = sizes[-2], sizes[-1]
            slope = (measured[hi] - measured[lo]) / (hi - lo)
            return optimism * (measured[hi] + slope * (batch - hi))
        lo = max((b for b in sizes if b < batch), default=sizes[0])
        hi = min(b for b in sizes if b > batch)
        if lo > batch:  # below the smallest measured size
            return measured[lo] * batch / lo
        return measured[lo] + (measured[hi] - measured[lo]) * (batch - lo) / (hi - lo)

    def step_cost(self, batch: int) -> float | None:
        """Seconds of one lockstep decoder step of ``batch`` rows (None: nothing measured)."""
        return self._estimate(self._step, batch, self.config.optimism)

    def encode_cost(self, positions: int, batch: int) -> float | None:
        same = {b: s for (p, b), s in self._encode.items() if p == positions}
        return self._estimate(same, batch, self.config.optimism)

    # ------------------------------------------------------------------ decisions

    def decoder_batch(self, waiting: int) -> int:
        """How many of ``waiting`` jobs to decode together (at least 1)."""
        cfg = self.config
        limit = max(1, min(waiting, cfg.max_batch))
        single = self.step_cost(1)
        if single is None:
            return 1  # measure one row first
        best, best_per_row = 1, single
        for b in range(2, limit + 1):
            cost = self.step_cost(b)
            if cost is None or cost > cfg.max_slowdown * single:
                break
            if cost / b < best_per_row:
                best, best_per_row = b, cost / b
        return best

    def encode_together(self, positions: int, batch: int) -> bool:
        """Does one encoder call for ``batch`` windows of ``positions`` beat ``batch`` calls?"""
        if batch < 2:
            return False
        single = self.encode_cost(positions, 1)
        together = self.encode_cost(positions, batch)
        if single is None:
            return False
        if together is None:
            return True
        return together <= (1 - self.config.min_encoder_saving) * batch * single

    def snapshot(self) -> dict[str, float]:
        """Measured means for /metrics and reports."""
        step, batches = dict(self._step), dict(self.batches)  # atomic copies (another thread)
        out = {f"step_s_b{b}": s for b, s in sorted(step.items())}
        out.update({f"batches_b{b}": float(n) for b, n in sorted(batches.items())})
        total = sum(batches.values())
        if total:
            out["batch_size_mean"] = sum(b * n for b, n in batches.items()) / total
        return out
