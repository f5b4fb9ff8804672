"""The pace of a stream's partials under load (`core.load_shed`), and its effect on the policy
and the stream protocol: pure, no model, clock or thread."""

from __future__ import annotations

import numpy as np
import pytest
from energy_vad import energy_vad

from streamcap.core.decode_types import DecodeResult
from streamcap.core.live_config import LiveConfig
from streamcap.core.load_shed import LoadShedConfig, LoadShedder, Pace, PaceEvent, behind_s
from streamcap.core.state_machine import TransitionError
from streamcap.core.stream import DecodeOrder, StreamProtocol

SR = 16_000


def test_behind_is_the_oldest_decode_out_plus_the_cost_of_those_queued_behind_it() -> None:
    assert behind_s(10.0, [], 0.7) == 0.0
    assert behind_s(10.0, [9.2], None) == pytest.approx(0.8)
    assert behind_s(10.0, [9.2, 9.8, 9.9], 0.5) == pytest.approx(0.8 + 2 * 0.5)
    assert behind_s(10.0, [10.5], 0.5) == 0.0  # audio ahead of the clock: not behind


def test_pace_thins_then_pauses_and_comes_back_with_hysteresis() -> None:
    sh = LoadShedder(LoadShedConfig(thin_s=1.5, pause_s=2.5, caught_up_s=1.0))
    seen = [sh.update(t, b) for t, b in enumerate([0.5, 1.4, 1.6, 2.0, 2.6, 1.8, 1.2, 1.1, 0.9])]
    assert seen == [
        Pace.LIVE, Pace.LIVE, Pace.THINNED, Pace.THINNED, Pace.PAUSED,
        Pace.PAUSED,  # 1.8 >= pause_s / 2: still paused
        Pace.THINNED, Pace.THINNED, Pace.LIVE,
    ]  # fmt: skip
    assert sh.changes == 4 and sh.worst_s == 2.6
    assert sh.time_in["paused"] == pytest.approx(2.0)


def test_a_jump_from_live_past_the_pause_threshold_pauses_at_once() -> None:
    sh = LoadShedder()
    assert sh.update(0.0, 9.0) is Pace.PAUSED
    assert sh.interval_scale() is None and not sh.partial_beside_final
    assert sh.update(1.0, 0.2) is Pace.LIVE
    assert sh.interval_scale() == 1.0 and sh.partial_beside_final


def test_disabled_never_changes_pace_but_still_measures() -> None:
    sh = LoadShedder(LoadShedConfig(enabled=False))
    assert sh.update(0.0, 30.0) is Pace.LIVE and sh.worst_s == 30.0


def test_the_table_refuses_what_it_does_not_hold() -> None:
    sh = LoadShedder()
    with pytest.raises(TransitionError):
        sh._machine.fire(PaceEvent.EASED)


def test_bad_thresholds_are_refused() -> None:
    with pytest.raises(ValueError):
        LoadShedConfig(thin_s=3.0, pause_s=2.0)
    with pytest.raises(ValueError):
        LoadShedConfig(thin_factor=0.5)


RNG = np.random.default_rng(3)


def _result(text: str) -> DecodeResult:
    return DecodeResult(tuple(range(1, len(text.split()) + 1)), text, "en", 0.01, -0.1, "eot")


def _run(shed: LoadShedConfig, delay_s: float) -> tuple[int, float, StreamProtocol]:
    """Six utterances of 3 s (noise: speech to the energy VAD) 1 s apart, fed 0.1 s at a time
    to a worker that takes ``delay_s`` of stream time per decode, one at a time, in order.
    Partials and finals share it as they would a worker that never preempts: the oldest order
    first (the real worker takes finals first, but a partial it started still runs to its end).
    The partials ordered, and the finals' worst wait from the end of their audio."""
    p = StreamProtocol(LiveConfig(language="en", load_shed=shed), energy_vad())
    talk = [(0.2 * RNG.standard_normal(3 * SR)).astype(np.float32) for _ in range(6)]
    audio = np.concatenate([x for t in talk for x in (t, np.zeros(SR, np.float32))])
    waiting: list[tuple[float, DecodeOrder]] = []
    partials, worst = 0, 0.0
    busy_until = 0.0

    def pull(now: float) -> None:
        nonlocal partials
        for o in p.take_outputs():
            if isinstance(o, DecodeOrder):
                waiting.append((now, o))
                partials += o.request.kind == "partial"

    step = SR // 10
    for i in range(0, len(audio) + 200 * step, step):
        now = (i + step) / SR
        if i < len(audio):
            p.receive_audio(audio[i : i + step], now)
        elif i == len(audio):
            p.receive_end(now)
        pull(now)
        if waiting and now >= max(busy_until, waiting[0][0]) + delay_s:
            _, o = waiting.pop(0)
            busy_until = now
            p.prepare(o.request.id)
            p.receive_result(o.request.id, _result("words " * 5), now)
            if o.request.kind == "final":
                worst = max(worst, now - o.request.end)
            pull(now)
    return partials, worst, p


def test_a_slow_worker_gets_fewer_partials_and_its_finals_wait_less() -> None:
    fast = _run(LoadShedConfig(), 0.5)
    assert fast[2].load.changes == 0  # a quick worker: live all along
    off = _run(LoadShedConfig(enabled=False), 2.5)
    on = _run(LoadShedConfig(), 2.5)
    assert on[0] < off[0]  # partials gave way
    assert on[1] < off[1]  # and the finals came sooner
    assert on[2].load.time_in["thinned"] + on[2].load.time_in["paused"] > 0


def test_a_stream_with_nothing_out_for_a_while_has_caught_up() -> None:
    """Late results pause the partials; in the pause that follows, with no decode out, the
    stream counts as caught up after `RECENT_S` (its next utterance gets partials again)."""
    from streamcap.core.stream import RECENT_S

    p = StreamProtocol(LiveConfig(language="en"), energy_vad())
    t, step = 0.0, SR // 10
    talk = (0.2 * RNG.standard_normal(3 * SR)).astype(np.float32)
    audio = np.concatenate([talk, np.zeros(8 * SR, np.float32)])
    for i in range(0, len(audio), step):
        t = (i + step) / SR
        p.receive_audio(audio[i : i + step], t)
        for o in p.take_outputs():
            if isinstance(o, DecodeOrder):  # every decode comes back 3 s late
                p.prepare(o.request.id)
                late = o.request.end + 3.0
                p.receive_result(o.request.id, _result("late words"), late)
        if p.load.pace is Pace.PAUSED:
            break
    assert p.load.pace is Pace.PAUSED and p.outstanding == 0
    back, paces = None, []
    for i in range(int(t * SR), len(audio), step):
        t = (i + step) / SR
        p.receive_audio(audio[i : i + step], t)
        for o in p.take_outputs():
            if isinstance(o, DecodeOrder):  # the utterance's final, 3 s late too
                p.prepare(o.request.id)
                back = t + 3.0
                p.receive_result(o.request.id, _result("late words"), back)
        if back is not None:
            paces.append((t - back, p.load.pace))
    assert back is not None and p.outstanding == 0
    assert all(pace is Pace.PAUSED for since, pace in paces if since < RECENT_S - 0.1)
    assert [pace for since, pace in paces if since > RECENT_S + 0.1][-1] is Pace.LIVE
