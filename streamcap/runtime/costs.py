"""The worker's cost model: what a batch of each size costs, as measured on this machine.

The worker batches when several jobs wait: their decoder steps run in lockstep as one batch
(weights are read once per step for every row), and partials' windows of the same encoder
context can go through the encoder in one call. Whether that pays depends on the machine (a
2-core CPU is compute-bound in the encoder, memory-bound in a decoder step; a GPU is neither
at batch 1), so the worker measures instead of assuming: every batched call reports its batch
size and seconds here, and the model keeps an exponentially weighted mean per size.

`decoder_batch` weighs whole jobs: a batch still runs each job's encoder before the lockstep
decode, so it pays only where the decoder is a large share of a job (on this 2-core CPU a
final's 30 s encoder is ~0.7 s against ~0.15 s of decoding: finals run alone; a partial
without a draft decodes for longer than its short encoder: those batch). It picks the size
that saves the largest share of the jobs' one-by-one time, at least `min_saving`, and takes
at most `max_batch_wall_s` (whatever arrives meanwhile, a final too, waits for all of it; in
a load test on this CPU, batches of partials under load took time the finals needed). Sizes not
measured yet are
estimated from the measured ones (interpolated; beyond the largest measured, the trend a
little optimistically), so each is tried and then judged by what it really cost. Pure
logic: no clock, no model.
"""

from __future__ import annotations

from dataclasses import dataclass

from streamcap.runtime.worker_status import BatchFigures

__all__ = ["CostModel", "CostModelConfig"]


@dataclass(frozen=True)
class CostModelConfig:
    max_batch: int = 8
    #: weight of a new measurement in the running mean
    alpha: float = 0.2
    #: a batched decode may take at most this many times one job's decode
    max_slowdown: float = 3.0
    #: an unmeasured size is estimated this much cheaper than the trend, so it gets tried
    optimism: float = 0.9
    #: a batched encoder call must save at least this share against one call per window
    min_encoder_saving: float = 0.05
    #: a batch must save at least this share of its jobs' time run one by one (encoder
    #: included: each job's encoder still runs before the lockstep decode, so a batch delays
    #: its first job by the others' encoders; a small saving is not worth that)
    min_saving: float = 0.15
    #: a batch may take at most this long (estimated): a final that arrives meanwhile waits
    #: for the whole batch, and a batch of partials under load takes time finals need
    max_batch_wall_s: float = 0.5


class CostModel:
    """Running mean cost per batch size of a decoder step and of an encoder call (per encoder
    context); not thread-safe (the worker's thread owns it)."""

    def __init__(self, config: CostModelConfig | None = None) -> None:
        self.config = config or CostModelConfig()
        self._step: dict[int, float] = {}
        self._encode: dict[tuple[int, int], float] = {}  # (positions, batch) -> seconds
        self._job: dict[str, tuple[float, float]] = {}  # kind -> (encoder, decoder) at batch 1
        self._lockstep: dict[tuple[str, int], float] = {}  # (kind, batch) -> decode seconds
        self.batches: dict[int, int] = {}  # decoder batches run, by size

    # ------------------------------------------------------------------ measurements

    def observe_step(self, batch: int, seconds: float) -> None:
        self._step[batch] = self._mean(self._step.get(batch), seconds)

    def observe_job(self, kind: str, encoder_s: float, decoder_s: float) -> None:
        """One job of ``kind`` run alone: its encoder and decoder seconds."""
        old = self._job.get(kind)
        self._job[kind] = (
            self._mean(old[0] if old else None, encoder_s),
            self._mean(old[1] if old else None, decoder_s),
        )

    def observe_lockstep(self, kind: str, batch: int, decoder_s: float) -> None:
        """A lockstep decode of ``batch`` jobs of ``kind`` took ``decoder_s`` (wall)."""
        key = (kind, batch)
        self._lockstep[key] = self._mean(self._lockstep.get(key), decoder_s)

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

    def job_cost(self, kind: str) -> float | None:
        """Mean seconds of one job of ``kind`` run alone (encoder + decoder), once measured."""
        job = self._job.get(kind)  # one read: another thread may write
        return None if job is None else job[0] + job[1]

    def step_cost(self, batch: int) -> float | None:
        """Seconds of one lockstep decoder step of ``batch`` rows (None: nothing measured)."""
        return self._estimate(self._step, batch, self.config.optimism)

    def encode_cost(self, positions: int, batch: int) -> float | None:
        same = {b: s for (p, b), s in self._encode.items() if p == positions}
        return self._estimate(same, batch, self.config.optimism)

    # ------------------------------------------------------------------ decisions

    def lockstep_cost(self, kind: str, batch: int) -> float | None:
        """Seconds of a lockstep decode of ``batch`` jobs of ``kind``: measured, else a single
        job's decode scaled by what a step of that size costs against one row."""
        measured = self._lockstep.get((kind, batch))
        if measured is not None:
            return measured
        job, one, step = self._job.get(kind), self.step_cost(1), self.step_cost(batch)
        if job is None or one is None or step is None or one <= 0:
            return None
        return job[1] * step / one

    def decoder_batch(self, waiting: int, kind: str = "partial") -> int:
        """How many of ``waiting`` jobs of ``kind`` to run together (at least 1): the size that
        saves the largest share of their one-by-one time, if it saves at least `min_saving`
        and its decode stays within `max_slowdown` of one job's."""
        cfg = self.config
        limit = max(1, min(waiting, cfg.max_batch))
        job = self._job.get(kind)
        if job is None or limit < 2:
            return 1  # measure one job first
        encoder_s, decoder_s = job
        best, best_saving = 1, cfg.min_saving
        for b in range(2, limit + 1):
            lockstep = self.lockstep_cost(kind, b)
            if lockstep is None or lockstep > cfg.max_slowdown * decoder_s:
                break
            alone = b * (encoder_s + decoder_s)
            if b * encoder_s + lockstep > cfg.max_batch_wall_s:
                break
            saving = (alone - (b * encoder_s + lockstep)) / alone
            if saving > best_saving:
                best, best_saving = b, saving
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

    def batch_figures(self) -> BatchFigures:
        """The batches run and the measured step costs, for /metrics and reports (copied at
        once: the job thread may be writing)."""
        step, batches = dict(self._step), dict(self.batches)  # atomic copies
        return BatchFigures(
            batches=dict(sorted(batches.items())), step_s=dict(sorted(step.items()))
        )
