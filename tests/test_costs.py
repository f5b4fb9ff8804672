"""The worker's cost model (`runtime.costs`): batch sizes chosen from measured costs."""

from __future__ import annotations

import pytest

from streamcap.runtime.costs import CostModel, CostModelConfig


def test_one_row_is_measured_first_then_larger_batches_are_tried() -> None:
    m = CostModel()
    assert m.decoder_batch(4) == 1  # nothing measured
    m.observe_step(1, 0.020)
    # one point: 2 rows estimated at 0.9 x 2 x 20 ms = 36 ms, 18 ms per row: try it
    assert m.step_cost(2) == pytest.approx(0.036)
    assert m.decoder_batch(4) == 2
    m.observe_step(2, 0.024)  # it paid: 12 ms per row; 4 rows extrapolated at 0.9 x 32 ms
    assert m.step_cost(4) == pytest.approx(0.9 * 0.032)
    assert m.decoder_batch(4) == 4


def test_memory_bound_steps_batch_and_compute_bound_steps_do_not() -> None:
    cheap = CostModel()  # a memory-bound step: rows nearly free
    for b, s in {1: 0.020, 2: 0.022, 4: 0.026, 8: 0.034}.items():
        cheap.observe_step(b, s)
    assert cheap.decoder_batch(8) == 8
    assert cheap.decoder_batch(3) == 3  # never more rows than wait

    dear = CostModel()  # compute-bound: a row costs what it costs, batched or not
    for b, s in {1: 0.020, 2: 0.041, 4: 0.083}.items():
        dear.observe_step(b, s)
    assert dear.decoder_batch(4) == 1


def test_a_batch_slower_than_the_limit_is_not_chosen_even_if_cheaper_per_row() -> None:
    m = CostModel(CostModelConfig(max_slowdown=2.0))
    for b, s in {1: 0.020, 2: 0.030, 4: 0.050}.items():  # 4 rows: 2.5 x one row
        m.observe_step(b, s)
    assert m.decoder_batch(4) == 3  # 40 ms (interpolated): just within 2 x 20 ms


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


def test_snapshot_reports_batch_sizes() -> None:
    m = CostModel()
    for b in (1, 2, 2, 3):
        m.observe_batch(b)
    m.observe_step(2, 0.03)
    snap = m.snapshot()
    assert snap["batch_size_mean"] == pytest.approx(2.0)
    assert snap["step_s_b2"] == pytest.approx(0.03)
