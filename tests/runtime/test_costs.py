"""The worker's cost model (`runtime.costs`): batch sizes chosen from measured costs."""

from __future__ import annotations

import pytest

from streamcap.runtime.costs import CostModel, CostModelConfig
from streamcap.runtime.worker_status import BatchFigures

MEMORY_BOUND = {1: 0.020, 2: 0.021, 4: 0.024, 8: 0.030}  # rows nearly free per step


def _model(steps: dict[int, float], **cfg: float) -> CostModel:
    cfg.setdefault("max_batch_wall_s", 60.0)  # the wall limit has a test of its own
    m = CostModel(CostModelConfig(**cfg))  # type: ignore[arg-type]
    for b, s in steps.items():
        m.observe_step(b, s)
    return m


def test_one_job_is_measured_first() -> None:
    m = _model(MEMORY_BOUND)
    assert m.decoder_batch(4, "partial") == 1  # no job of that kind measured yet
    m.observe_job("partial", 0.05, 0.60)
    assert m.decoder_batch(4, "partial") == 4
    assert m.decoder_batch(1, "partial") == 1


def test_finals_whose_encoder_dominates_run_alone_even_with_cheap_steps() -> None:
    m = _model(MEMORY_BOUND)
    m.observe_job("final", 0.70, 0.15)  # this CPU: the 30 s encoder is most of a final
    # 2 finals: 1.70 s alone, 1.40 + 0.16 batched: 8 % saved, under the 15 % asked for
    assert m.lockstep_cost("final", 2) == pytest.approx(0.15 * 0.021 / 0.020)
    assert m.decoder_batch(8, "final") == 1
    m.observe_job("final", 0.05, 0.15)  # a GPU-like encoder: now the decoder dominates
    m.observe_job("final", 0.05, 0.15)
    m.observe_job("final", 0.05, 0.15)
    m.observe_job("final", 0.05, 0.15)
    m.observe_job("final", 0.05, 0.15)
    m.observe_job("final", 0.05, 0.15)
    m.observe_job("final", 0.05, 0.15)
    assert m.decoder_batch(8, "final") == 8


def test_compute_bound_steps_do_not_batch() -> None:
    m = _model({1: 0.020, 2: 0.041, 4: 0.083})
    m.observe_job("partial", 0.05, 0.60)
    assert m.decoder_batch(4, "partial") == 1


def test_a_measured_lockstep_overrules_the_estimate() -> None:
    m = _model(MEMORY_BOUND)
    m.observe_job("partial", 0.05, 0.60)
    assert m.decoder_batch(2, "partial") == 2
    m.observe_lockstep("partial", 2, 1.25)  # it did not pay on this machine
    assert m.decoder_batch(2, "partial") == 1


def test_a_batch_slower_than_the_limit_is_not_chosen() -> None:
    m = _model({1: 0.020, 4: 0.050}, max_slowdown=2.0)
    m.observe_job("partial", 0.05, 0.60)
    # 4 rows: 1.5 s > 2 x 0.6 s; 3 rows (interpolated 40 ms steps): 1.2 s, just within
    assert m.decoder_batch(4, "partial") == 3


def test_measurements_are_running_means() -> None:
    m = CostModel(CostModelConfig(alpha=0.5))
    m.observe_step(1, 0.010)
    m.observe_step(1, 0.030)
    assert m.step_cost(1) == pytest.approx(0.020)


def test_encoder_batches_only_when_measured_to_save() -> None:
    m = CostModel()
    assert not m.encode_together(500, 2)  # one window not measured yet
    m.observe_encode(500, 1, 0.30)
    assert m.encode_together(500, 2)  # not measured at 2: try it
    m.observe_encode(500, 2, 0.60)  # compute-bound: no saving
    assert not m.encode_together(500, 2)
    m.observe_encode(1500, 1, 0.70)
    m.observe_encode(1500, 2, 1.10)  # a GPU-like saving, at another context length
    assert m.encode_together(1500, 2)
    assert not m.encode_together(500, 2)


def test_batch_figures_report_batch_sizes() -> None:
    m = CostModel()
    assert m.batch_figures() == BatchFigures() and BatchFigures().mean_size is None
    for b in (3, 1, 2, 2):
        m.observe_batch(b)
    m.observe_step(2, 0.03)
    figures = m.batch_figures()
    assert figures.batches == {1: 1, 2: 2, 3: 1} and list(figures.batches) == [1, 2, 3]
    assert figures.mean_size == pytest.approx(2.0)
    assert figures.step_s == {2: pytest.approx(0.03)}
    m.observe_batch(8)  # a copy: what was handed out does not change
    assert 8 not in figures.batches and m.batch_figures().batches[8] == 1


def test_a_batch_longer_than_the_wall_limit_is_not_chosen() -> None:
    m = _model(MEMORY_BOUND, max_batch_wall_s=0.5)
    m.observe_job("partial", 0.20, 0.30)  # this CPU: a 10 s context and a short decode
    # 2 partials: 0.40 + 0.32 s = 0.72 s > 0.5 s, though it would save 28 %
    assert m.decoder_batch(4, "partial") == 1
    m.observe_job("partial", 0.01, 0.10)  # a GPU-like job: batches fit
    for _ in range(10):
        m.observe_job("partial", 0.01, 0.10)
    assert m.decoder_batch(4, "partial") == 4
