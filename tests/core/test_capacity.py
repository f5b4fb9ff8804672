"""Admission control's rule (`core.capacity`), driven without a model, clock or socket."""

from __future__ import annotations

import math
import re

import pytest

from streamcap.core.capacity import CapacityConfig, Load, LoadMeter, admit

CFG = CapacityConfig(max_finals_load=0.7, max_final_wait_s=1.5, window_s=60, min_evidence_s=30)


def run(meter: LoadMeter, streams: int, seconds: int, final_every_s: float, cost: float) -> float:
    """``streams`` streams for ``seconds``: each ends an utterance every ``final_every_s``
    (staggered), its final costing ``cost`` worker seconds; partials cost as much again."""
    meter.streams_changed(0.0, streams)
    t = 0.0
    step = final_every_s / streams
    while t < seconds:
        t += step
        meter.job_done(t, True, cost, 0.2)
        meter.job_done(t, False, cost, 0.5)
    return t


def test_measured_load_is_finals_seconds_per_stream_second() -> None:
    meter = LoadMeter(CFG)
    now = run(meter, streams=2, seconds=60, final_every_s=5.0, cost=0.5)
    load = meter.load(now)
    assert load.per_stream_finals == pytest.approx(0.1, rel=0.05)  # 0.5 s per 5 s
    assert load.finals == pytest.approx(0.2, rel=0.05)
    assert load.busy == pytest.approx(0.4, rel=0.05)
    assert load.final_wait_p95_s == pytest.approx(0.2)


def test_streams_are_admitted_while_their_finals_fit() -> None:
    meter = LoadMeter(CFG)
    now = run(meter, streams=4, seconds=120, final_every_s=5.0, cost=0.75)  # 0.15 per stream
    load = meter.load(now)
    assert admit(load, 3, None, CFG).ok  # 4 x 0.15 = 0.6 <= 0.7
    refused = admit(load, 4, None, CFG)  # 5 x 0.15 = 0.75 > 0.7
    assert not refused.ok and refused.capacity == 4
    assert "about 4 streams fit" in refused.reason
    assert re.fullmatch(
        r"the finals of 4 live streams take 6\d % of the worker; one more would take 7\d %, "
        r"over the limit of 70 % \(about 4 streams fit\)",
        refused.reason,
    )


def test_the_first_stream_is_always_admitted_and_no_evidence_uses_the_prior() -> None:
    meter = LoadMeter(CFG)
    assert admit(meter.load(0.0), 0, None, CFG).ok
    meter.set_prior(1.71)  # a final costs 1.71 s; one per 5.7 s of speech: 0.3 per stream
    assert meter.prior == pytest.approx(0.3)
    assert admit(meter.load(0.0), 1, meter.prior, CFG).ok  # 0.6
    # 0.9: over 0.7 even with the prior's slack (x 1.25 = 0.875)
    assert not admit(meter.load(0.0), 2, meter.prior, CFG).ok
    meter.set_prior(0.456)  # 0.08 per stream: 10 fit by the prior's limit, 8 by 0.7
    assert admit(meter.load(0.0), 9, meter.prior, CFG).ok
    assert admit(meter.load(0.0), 5, None, CFG).ok  # no prior, no evidence: admit


def test_late_finals_refuse_new_streams_until_they_are_on_time_again() -> None:
    meter = LoadMeter(CFG)
    meter.streams_changed(0.0, 2)
    for i in range(10):
        meter.job_done(1.0 + i, True, 0.1, 4.0)  # finals waited 4 s
    decision = admit(meter.load(11.0), 2, None, CFG)
    assert not decision.ok and "finals wait 4.0 s for the worker; the limit is" in decision.reason
    for i in range(10):  # the latest ten were on time
        meter.job_done(12.0 + i, True, 0.1, 0.1)
    assert admit(meter.load(22.0), 2, None, CFG).ok


def test_old_jobs_leave_the_window() -> None:
    meter = LoadMeter(CFG)
    run(meter, streams=1, seconds=30, final_every_s=5.0, cost=2.0)
    meter.streams_changed(30.0, 1)
    later = meter.load(200.0)
    assert later.finals == 0.0 and later.busy == 0.0
    assert later.stream_seconds == pytest.approx(60.0)  # one stream over the last 60 s
    assert later.per_stream_finals == 0.0


def test_a_lenient_config_never_refuses_for_load() -> None:
    lenient = CapacityConfig(max_finals_load=math.inf, max_final_wait_s=math.inf)
    load = Load(stream_seconds=100, per_stream_finals=5.0, final_wait_p95_s=60.0)
    assert admit(load, 50, None, lenient).ok
    with pytest.raises(ValueError):
        CapacityConfig(max_finals_load=0)


def test_a_publisher_joining_a_live_room_shares_its_talking_time() -> None:
    """A room's publishers take turns: on the prior, a second member costs no new stream
    (a 2-core CPU whose one final is 30 % of the prior's limit of 31 % fits the room), while a
    second room is refused with a reason a person reads."""
    cfg = CapacityConfig(max_finals_load=0.25)
    meter = LoadMeter(cfg)
    meter.set_prior(1.71)  # 0.3 per stream: one fits under 0.25 x 1.25
    load = meter.load(0.0)
    assert admit(load, 1, meter.prior, cfg, joins_room=True).ok
    other = admit(load, 1, meter.prior, cfg)
    assert not other.ok
    assert other.reason == (
        "the finals of 1 live stream take 30 % of the worker; one more would take 60 %, "
        "over the limit of 31 % (about 1 stream fit)"
    )


def test_a_room_whose_talkers_overlap_is_refused_on_what_is_measured() -> None:
    """A room member is refused once the finals measured already take more than the limit."""
    cfg = CapacityConfig(max_finals_load=0.25)
    meter = LoadMeter(cfg)
    now = run(meter, streams=1, seconds=120, final_every_s=2.0, cost=0.8)  # finals: 40 %
    decision = admit(meter.load(now), 1, None, cfg, joins_room=True)
    assert not decision.ok
    assert re.fullmatch(
        r"the worker spends 4\d % of its time on finals; the limit is 25 %", decision.reason
    )
    quiet = LoadMeter(cfg)
    now = run(quiet, streams=1, seconds=120, final_every_s=5.0, cost=0.75)  # finals: 15 %
    assert admit(quiet.load(now), 1, None, cfg, joins_room=True).ok
