"""The thread counts follow the load (issue 38) and never change a token: the encoder's only
where that changes no bit (`runtime.encoder_threads`), the decoder's wholly on one thread or as
a one-thread draft that the full count verifies (`runtime.decoder_threads`).

The strategies are driven with a fake timer (which count is faster is what they must find, and
find again when the load changes); the guard runs the real encoder of the bundled model on real
speech on 1 and on 2 threads and compares the bits, and a live stream on an engine whose encoder
alternates between the two counts at every call and whose decoder runs on one thread (wholly,
or as a draft) gives finals token for token the same as greedy decoding on 2 threads.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from streamcap.core.decode_types import DecodeResult, DecodeStats
from streamcap.decoding.drafters import Drafter, HypothesisDrafter, NoDrafter
from streamcap.decoding.verify import DraftLength
from streamcap.runtime.decoder_threads import DecodeRun, LoadFollowingDecode
from streamcap.runtime.encoder_threads import AdaptiveThreads, FixedThreads, identical_across


class Timer:
    """A clock whose calls take ``cost[threads]`` seconds: the test sets the load."""

    def __init__(self) -> None:
        self.t = 0.0
        self.cost = {1: 1.0, 2: 0.6}

    def __call__(self) -> float:
        return self.t

    def spend(self) -> None:
        self.t += self.cost[torch.get_num_threads()]


Call = tuple[int, str, int | None]  # (threads, drafter, draft length) of one decode run


def decodes_of_five_six_seven(timer: Timer) -> tuple[list[Call], DecodeRun]:
    """A decode run that records each call and always gives (5, 6, 7): a whole decode costs
    ``timer.cost`` of the calling count, a verify (a draft length given: one pass) 0.1 s."""
    calls: list[Call] = []

    def run(drafter: Drafter, length: DraftLength | None) -> DecodeResult:
        calls.append((torch.get_num_threads(), drafter.name, length.k if length else None))
        timer.t += 0.1 if length else timer.cost[torch.get_num_threads()]
        stats = DecodeStats(forward_passes=1, decoder_s=0.1)
        return DecodeResult((5, 6, 7), "", None, 0.0, None, "eot", stats)

    return calls, run


def run(strategy: AdaptiveThreads, timer: Timer, calls: int) -> list[int]:
    used = []
    for _ in range(calls):
        with strategy.run(1500) as n:
            assert torch.get_num_threads() == n
            timer.spend()
            used.append(n)
    return used


def test_it_settles_on_the_faster_count_and_follows_a_change_of_load() -> None:
    timer = Timer()
    outside = torch.get_num_threads()
    s = AdaptiveThreads((1, 2), probe_every=8, timer=timer)
    quiet = run(s, timer, 40)
    assert quiet[:2] == [1, 2]  # each measured once
    assert quiet[2:].count(2) >= 34  # then 2 (quiet: faster), 1 only as a probe
    assert torch.get_num_threads() == outside  # the decoder's count is left as it was
    timer.cost = {1: 1.0, 2: 1.9}  # another program takes a core: 2 threads fight it
    busy = run(s, timer, 40)
    assert busy[-30:].count(1) >= 26, busy  # found within a few calls
    timer.cost = {1: 1.0, 2: 0.6}  # quiet again
    assert run(s, timer, 40)[-20:].count(2) >= 17


def test_fixed_keeps_torchs_count() -> None:
    with FixedThreads().run(1500) as n:
        assert n == torch.get_num_threads()


def test_a_busy_machine_decodes_on_one_thread() -> None:
    """Where one thread is cheaper (found by its own measurements) the whole decode runs there,
    once, with the caller's drafter; quiet again, on the full count."""
    timer = Timer()
    timer.cost = {1: 0.3, 2: 1.0}  # busy: two threads fight the other program (a whole decode)
    outside = torch.get_num_threads()
    calls, run = decodes_of_five_six_seven(timer)

    strategy = LoadFollowingDecode(2, probe_every=8, timer=timer)
    for _ in range(30):
        assert strategy.decode(run, NoDrafter(), eot=9).tokens == (5, 6, 7)
    assert len(calls) == 30 and calls[-20:].count((1, "none", None)) >= 17, calls
    assert strategy.figures()["decoded_on_1"] == sum(c[0] == 1 for c in calls)
    assert strategy.threads_now() == 1  # word timing follows
    timer.cost = {1: 1.0, 2: 0.6}
    for _ in range(40):
        strategy.decode(run, NoDrafter(), eot=9)
    assert calls[-10:].count((2, "none", None)) >= 8 and strategy.threads_now() == 2
    assert torch.get_num_threads() == outside


def test_as_an_option_a_one_thread_draft_is_verified_on_all_threads() -> None:
    """``one_is_exact=False``: the decode is drafted on one thread and verified on the full
    count with the whole draft (and end-of-text) in one pass; the result is the verifying run's."""
    timer = Timer()
    timer.cost = {1: 0.3, 2: 1.0}  # busy: two threads fight the other program (a whole decode)
    outside = torch.get_num_threads()
    calls, run = decodes_of_five_six_seven(timer)

    strategy = LoadFollowingDecode(2, one_is_exact=False, probe_every=8, timer=timer)
    for _ in range(30):
        result = strategy.decode(run, NoDrafter(), eot=9)
        assert result.tokens == (5, 6, 7)
    on_one = [c for c in calls if c[0] == 1]
    verifies = [c for i, c in enumerate(calls) if i and calls[i - 1][0] == 1]
    assert len(on_one) >= 20 and all(c[1] == "none" for c in on_one)  # the caller's drafter
    assert all(c == (2, "hypothesis", 4) for c in verifies)  # 3 tokens + end-of-text, on 2
    assert strategy.figures()["drafted_on_1"] == len(on_one)
    assert strategy.threads_now() == 2  # what nobody verifies stays on the full count
    assert torch.get_num_threads() == outside
    assert HypothesisDrafter((5, 6, 7), eot=9).propose([], 4) == [5, 6, 7, 9]


@pytest.mark.parametrize("exact", [True, False])
def test_the_decoder_follows_the_count_the_encoder_prefers(exact: bool) -> None:
    """With the encoder adapting, the decoder decodes (or drafts) on one thread while the
    encoder prefers one, and decodes on 2 again when it does (no probes of its own)."""
    timer = Timer()
    encoder = AdaptiveThreads((1, 2), probe_every=8, timer=timer)
    strategy = LoadFollowingDecode(2, follow=encoder, one_is_exact=exact)
    seen: list[tuple[int, str]] = []

    def run(drafter: Drafter, length: DraftLength | None) -> DecodeResult:
        seen.append((torch.get_num_threads(), drafter.name))
        return DecodeResult((5,), "", None, 0.0, None, "eot", DecodeStats())

    for cost, want in (({1: 0.3, 2: 1.0}, 1), ({1: 1.0, 2: 0.6}, 2)):
        timer.cost = cost
        for _ in range(30):
            with encoder.run(1500):
                timer.spend()
        seen.clear()
        strategy.decode(run, NoDrafter(), eot=9)
        on_one = [(1, "none")] if exact else [(1, "none"), (2, "hypothesis")]
        assert seen == (on_one if want == 1 else [(2, "none")])


def test_bad_counts_are_refused() -> None:
    with pytest.raises(ValueError):
        AdaptiveThreads((2,))


@pytest.mark.model
def test_the_encoder_gives_the_same_bits_on_one_and_two_threads(engine: Any, speech: Any) -> None:
    """The guard's premise on this CPU and precision, checked on real speech (the engine
    adapts only where it holds: `Engine.adapt_threads`)."""
    if torch.get_num_threads() < 2:
        pytest.skip("one thread: nothing to choose")
    feats = engine.frontend.features(speech["en_real_jfk"], None)
    assert identical_across(lambda: engine.frontend.encode(feats, None), (1, 2))


@pytest.mark.model
@pytest.mark.parametrize("exact", [True, False], ids=["on-one", "drafted-on-one"])
def test_a_live_stream_on_alternating_thread_strategies_gives_greedys_finals(
    engine: Any, speech: Any, exact: bool
) -> None:
    """Every encoder call alternates between 1 and 2 threads (a probe at every call) and every
    decode runs on one thread (prompt, drafts from the partials and word timing included; or
    as the option has it, a one-thread draft verified on 2), and each final is still token for
    token plain greedy decoding of its window on 2 threads."""
    import numpy as np

    from streamcap.core.live_config import LiveConfig
    from streamcap.core.policy_config import PolicyConfig
    from streamcap.decoding.reference import reference_decode
    from streamcap.runtime.clock import SimulatedClock
    from streamcap.runtime.jobs import DecodeJob, JobOutcome
    from streamcap.runtime.replay import replay
    from streamcap.runtime.stream import LiveStream
    from streamcap.runtime.worker import InferenceWorker

    if torch.get_num_threads() < 2:
        pytest.skip("one thread: nothing to choose")
    before = engine.encoder_threads, engine.decoder_threads
    engine.encoder_threads = AdaptiveThreads((1, 2), probe_every=0)
    drafting = LoadFollowingDecode(2, one_is_exact=exact)
    drafting.counts.choose = lambda: 1  # type: ignore[method-assign]  # every decode on 1
    drafting.counts.preferred = lambda: 1  # type: ignore[method-assign]  # word timing too
    engine.decoder_threads = drafting
    try:
        gap = np.zeros(16000, np.float32)
        audio = np.concatenate([speech["en_real_jfk"], gap, speech["en_real_praatio_mary"], gap])
        policy = PolicyConfig(prompt_chars=200, prompt_scope="stream")  # prompts too
        config = LiveConfig(language="en", policy=policy)
        stream = LiveStream("t", InferenceWorker(engine), None, config, SimulatedClock())
        decodes: list[tuple[DecodeJob, JobOutcome]] = []
        stream.decode_observer = lambda job, out: decodes.append((job, out))
        replay(stream, audio)
        used = engine.encoder_threads.calls
    finally:
        engine.encoder_threads, engine.decoder_threads = before
    assert used[1] >= 1 and used[2] >= 1, used  # (batched encodes take their own path)
    assert drafting.on_one >= 3, drafting.figures()
    finals = [(j, o) for j, o in decodes if j.kind == "final" and o.result is not None]
    assert len(finals) >= 2
    assert any(o.options is not None and o.options.prompt_ids for _, o in finals)
    for job, out in finals:
        assert out.options is not None and out.result is not None
        enc = engine.encode(job.audio)
        ref, _ = reference_decode(engine.decoder, enc.enc, out.options, enc.duration_s)
        assert tuple(ref) == out.result.tokens


class Kernel:
    """/proc/stat of two CPUs and this process's CPU time, advanced by the test: ``others``
    cores of other programs' work and ``own`` of this process's per second."""

    def __init__(self) -> None:
        self.t = 0.0
        self.busy = [0.0, 0.0]
        self.own = 0.0

    def run(self, seconds: float, others: float, own: float = 1.0) -> None:
        self.t += seconds
        self.own += own * seconds
        for i in range(2):
            self.busy[i] += (others + own) / 2 * seconds

    def stat(self) -> str:
        lines = ["cpu  0 0 0 0 0 0 0 0 0 0"]
        for i, b in enumerate(self.busy):
            ticks = round(b * 100)
            idle = round(self.t * 100) - ticks
            lines.append(f"cpu{i} {ticks} 0 0 {idle} 0 0 0 0 0 0")
        return "\n".join(lines) + "\nintr 1 2 3\n"


def test_free_cores_follow_the_other_programs_load_with_a_margin() -> None:
    """The count is the cores the other programs leave (read from the kernel's counts, less this
    process's own), changing only past a margin, so a load near the line does not flip it."""
    from streamcap.runtime.free_cores import FreeCores, OtherLoad

    k = Kernel()
    load = OtherLoad(window_s=1.0, read=k.stat, own=lambda: k.own, clock=lambda: k.t)
    load.cpus = frozenset({0, 1})
    assert load.available
    cores = FreeCores(2, load)
    outside = torch.get_num_threads()

    def calls(seconds: float, others: float) -> list[int]:
        used = []
        for _ in range(int(seconds / 0.5)):
            k.run(0.5, others)
            with cores.run(1500) as n:
                assert torch.get_num_threads() == n
                used.append(n)
        return used

    assert calls(3, others=0.0)[-1] == 2  # quiet: both cores
    busy = calls(4, others=1.0)  # a busy process takes a core
    assert busy[-4:] == [1, 1, 1, 1], busy
    assert calls(4, others=0.3)[-1] == 1  # near the line: stays
    assert calls(4, others=0.0)[-1] == 2  # quiet again
    assert calls(4, others=0.3)[-1] == 2  # near the line from the other side: stays
    assert cores.changes == 2 and torch.get_num_threads() == outside
    assert cores.figures()["others_cores"] is not None
    assert not OtherLoad(read=lambda: "intr 1\n").available  # no CPU lines: not used
