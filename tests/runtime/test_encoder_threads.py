"""The encoder's thread count follows the load (`runtime.encoder_threads`, issue 38), and only
where that changes no bit.

The strategy is driven with a fake timer (which count is faster is what it must find, and find
again when the load changes); the guard runs the real encoder of the bundled model on real
speech on 1 and on 2 threads and compares the bits, and a live stream on an adapting engine
gives finals token for token the same as greedy decoding.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

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


def test_bad_counts_are_refused() -> None:
    with pytest.raises(ValueError):
        AdaptiveThreads((2,))


@pytest.mark.model
def test_the_encoder_gives_the_same_bits_on_one_and_two_threads(engine: Any, speech: Any) -> None:
    """The guard's premise on this CPU and precision, checked on real speech (the engine
    adapts only where it holds: `Engine.adapt_encoder_threads`)."""
    if torch.get_num_threads() < 2:
        pytest.skip("one thread: nothing to choose")
    feats = engine.frontend.features(speech["en_real_jfk"], None)
    assert identical_across(lambda: engine.frontend.encode(feats, None), (1, 2))


@pytest.mark.model
def test_a_live_stream_on_alternating_encoder_threads_gives_greedys_finals(
    engine: Any, speech: Any
) -> None:
    """Every encoder call alternates between 1 and 2 threads (a probe at every call), and each
    final is still token for token plain greedy decoding of its window (encoded on 2)."""
    import numpy as np

    from streamcap.core.live_config import LiveConfig
    from streamcap.decoding.reference import reference_decode
    from streamcap.runtime.clock import SimulatedClock
    from streamcap.runtime.jobs import DecodeJob, JobOutcome
    from streamcap.runtime.replay import replay
    from streamcap.runtime.stream import LiveStream
    from streamcap.runtime.worker import InferenceWorker

    if torch.get_num_threads() < 2:
        pytest.skip("one thread: nothing to choose")
    before = engine.encoder_threads
    engine.encoder_threads = AdaptiveThreads((1, 2), probe_every=0)
    try:
        gap = np.zeros(16000, np.float32)
        audio = np.concatenate([speech["en_real_jfk"], gap, speech["en_real_praatio_mary"], gap])
        stream = LiveStream("t", InferenceWorker(engine), None, LiveConfig(language="en"),
                            SimulatedClock())  # fmt: skip
        decodes: list[tuple[DecodeJob, JobOutcome]] = []
        stream.decode_observer = lambda job, out: decodes.append((job, out))
        replay(stream, audio)
        used = engine.encoder_threads.calls
    finally:
        engine.encoder_threads = before
    assert used[1] >= 1 and used[2] >= 1, used  # (batched encodes take their own path)
    finals = [(j, o) for j, o in decodes if j.kind == "final" and o.result is not None]
    assert len(finals) >= 2
    for job, out in finals:
        assert out.options is not None and out.result is not None
        enc = engine.encode(job.audio)
        ref, _ = reference_decode(engine.decoder, enc.enc, out.options, enc.duration_s)
        assert tuple(ref) == out.result.tokens
