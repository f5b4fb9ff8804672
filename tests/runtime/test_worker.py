"""The inference worker: scheduler rules with a fake engine, then the real model.

The fake engine stands in for Whisper where only the scheduling is under test (which job runs
when, what is dropped); the real bundled model checks the shortened encoder and exactness.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
import torch

from streamcap.audio import load_audio
from streamcap.core.decode_types import (
    DecodeResult,
    DecodeStats,
    DecodingOptions,
    JobInputs,
    PromptText,
)
from streamcap.runtime.clock import SimulatedClock
from streamcap.runtime.engine import Encoded
from streamcap.runtime.jobs import DecodeJob, JobOutcome
from streamcap.runtime.worker import InferenceWorker, encode_window

DATA = Path(__file__).resolve().parents[1] / "data"
SR = 16000


class FakeEngine:
    """Records what it decodes; `gate` (if set) holds every decode until released."""

    multilingual = True

    def __init__(self, gate: threading.Event | None = None, cost: float = 0.0) -> None:
        self.gate = gate
        self.cost = cost
        self.decoded: list[tuple[str, str, int]] = []
        self.fail_on: set[int] = set()
        self.started = threading.Event()

    def encode(self, audio: np.ndarray, context_s: float | None = None) -> Encoded:
        return Encoded(torch.zeros(1, 1500, 4), torch.zeros(1), len(audio) / SR, 0.0)

    def decode(
        self,
        encoded: Encoded,
        options: DecodingOptions,
        hypothesis: Sequence[int] | None = None,
        drafter: str = "auto",
    ) -> DecodeResult:
        self.started.set()
        if self.gate is not None:
            assert self.gate.wait(10)
        if self.cost:
            time.sleep(self.cost)
        n = round(encoded.duration_s * 10)
        if n in self.fail_on:
            raise RuntimeError("boom")
        stats = DecodeStats(drafted=2, accepted=1, forward_passes=3, decoder_s=0.01, tokens=n)
        return DecodeResult(tuple(range(n)), f"{n} units", "en", 0.01, -0.1, "eot", stats)

    def text_to_ids(self, text: str) -> tuple[int, ...]:
        return tuple(ord(c) for c in text)


class Recorder:
    def __init__(self) -> None:
        self.done: list[tuple[str, str, int, bool]] = []
        self.outcomes: list[JobOutcome] = []
        self.lock = threading.Lock()

    def __call__(self, job: DecodeJob, outcome: JobOutcome) -> None:
        with self.lock:
            self.done.append((job.stream, job.kind, job.window, outcome.dropped))
            self.outcomes.append(outcome)


def job(rec: Recorder, stream: str, kind: str, window: int, seconds: float = 1.0) -> DecodeJob:
    audio = np.zeros(round(seconds * SR), np.float32)
    return DecodeJob(stream, kind, window, audio, rec)  # type: ignore[arg-type]


def test_finals_first_stale_partials_dropped_streams_take_turns() -> None:
    rec = Recorder()
    w = InferenceWorker(FakeEngine())  # type: ignore[arg-type]
    w.submit(job(rec, "a", "partial", 1))
    w.submit(job(rec, "b", "partial", 1))
    w.submit(job(rec, "a", "partial", 1, 2.0))  # newer partial of "a": the first is stale
    w.submit(job(rec, "c", "partial", 4))
    w.submit(job(rec, "c", "final", 3))  # an older window's final leaves c's partial alone
    w.submit(job(rec, "b", "final", 1))  # b's final drops b's waiting partial of window 1
    assert rec.done == []  # submit never calls back: the stepping thread hears of drops
    assert w.queue_depth == 4 and not w.idle("a") and not w.idle("b")
    assert w.run_pending() == 4
    assert rec.done[:2] == [("a", "partial", 1, True), ("b", "partial", 1, True)]
    ran = [d[:3] for d in rec.done if not d[3]]
    assert ran == [("c", "final", 3), ("b", "final", 1), ("a", "partial", 1), ("c", "partial", 4)]
    stats = w.total_stats()
    assert stats.finals == 2 and stats.partials == 2 and stats.dropped_partials == 2
    assert stats.decode.forward_passes == 12 and stats.queue_depth == 0
    assert stats.as_dict()["forward_passes"] == 12 and stats.as_dict()["streams"] == 3
    assert w.stream_stats("c").jobs == 2 and w.stream_stats("b").dropped_partials == 1
    assert "streams" not in w.stream_stats("c").as_dict() and w.idle()


def test_submit_never_calls_back_in_the_submitting_thread() -> None:
    """Drops are told by the worker's own thread, so a feeder (the server's event loop) is
    never re-entered from inside its own `submit`."""
    gate = threading.Event()
    engine = FakeEngine(gate)
    seen: list[tuple[str, bool, str]] = []
    submitting = threading.current_thread().name

    def on_done(j: DecodeJob, outcome: JobOutcome) -> None:
        seen.append((j.kind, outcome.dropped, threading.current_thread().name))

    w = InferenceWorker(engine, name="worker-under-test").start()  # type: ignore[arg-type]
    try:
        audio = np.zeros(SR, np.float32)
        w.submit(DecodeJob("s", "final", 1, audio, on_done))
        assert engine.started.wait(5)  # the worker is busy with that final
        w.submit(DecodeJob("s", "partial", 2, audio, on_done))
        w.submit(DecodeJob("s", "partial", 3, audio, on_done))  # drops the partial of window 2
        w.submit(DecodeJob("s", "final", 3, audio, on_done))  # drops the partial of window 3
        assert seen == [] and not w.idle("s")
        gate.set()
        assert w.wait_idle(10)
    finally:
        w.stop()
    assert sorted(seen) == [
        ("final", False, "worker-under-test"),
        ("final", False, "worker-under-test"),
        ("partial", True, "worker-under-test"),
        ("partial", True, "worker-under-test"),
    ]
    assert all(name != submitting for _, _, name in seen)
    assert w.total_stats().dropped_partials == 2


def test_a_stepped_worker_tells_drops_in_the_stepping_thread() -> None:
    """Without a thread, drops are told by `run_one` (before the next job) or by `stop`."""
    rec = Recorder()
    w = InferenceWorker(FakeEngine())  # type: ignore[arg-type]
    w.submit(job(rec, "a", "partial", 1))
    w.submit(job(rec, "a", "partial", 2))
    assert rec.done == [] and not w.idle("a") and w.queue_depth == 1
    assert w.run_one()
    assert rec.done == [("a", "partial", 1, True), ("a", "partial", 2, False)]
    w.submit(job(rec, "b", "partial", 1))
    w.stop()
    assert rec.done[-1] == ("b", "partial", 1, True) and w.idle()


def test_per_stream_stats_stay_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    import streamcap.runtime.accounts as accounts_module

    monkeypatch.setattr(accounts_module, "MAX_STREAM_STATS", 3)
    rec = Recorder()
    w = InferenceWorker(FakeEngine())  # type: ignore[arg-type]
    for i in range(6):
        w.submit(job(rec, f"s{i}", "final", 1))
        w.run_pending()
        w.submit(job(rec, "busy", "final", 1))  # stays the most recently active
        w.run_pending()
    assert len(w._books._streams) == 3 and w.total_stats().streams == 7
    assert w.stream_stats("busy").jobs == 6
    assert w.stream_stats("s5").jobs == 1 and w.stream_stats("s0").jobs == 0
    assert w.total_stats().jobs == 12


def test_threaded_backlog_stays_bounded_and_every_final_is_decoded() -> None:
    gate = threading.Event()
    engine = FakeEngine(gate)
    rec = Recorder()
    w = InferenceWorker(engine).start()  # type: ignore[arg-type]
    try:
        w.submit(job(rec, "s0", "partial", 1))
        assert engine.started.wait(5)  # the worker is now stuck in that decode
        for i in range(60):  # a burst while the worker is behind: 5 streams
            s = f"s{i % 5}"
            w.submit(job(rec, s, "partial", i))
            if i % 6 == 5:
                w.submit(job(rec, s, "final", i))
            assert w.queue_depth <= 5 + 10
        gate.set()
        assert w.wait_idle(10)
    finally:
        w.stop()
    finals = [d for d in rec.done if d[1] == "final"]
    assert len(finals) == 10 and not any(d[3] for d in finals)  # never fewer finals
    ran_partials = [d for d in rec.done if d[1] == "partial" and not d[3]]
    assert len(ran_partials) <= 6  # when behind: fewer partials (the first + one per stream)
    assert w.total_stats().max_queue_depth <= 15
    assert not w.threaded


def test_prepare_runs_when_the_job_starts_and_errors_do_not_stop_the_worker() -> None:
    engine = FakeEngine()
    engine.fail_on.add(10)
    rec = Recorder()
    w = InferenceWorker(engine)  # type: ignore[arg-type]
    state = {"prompt": "old"}

    def prepare() -> JobInputs:  # the prompt as text: the worker tokenizes it
        return JobInputs(DecodingOptions(), PromptText("", state["prompt"]), (1, 2, 3))

    w.submit(job(rec, "a", "final", 1, 1.0))  # fails: 10 units
    j = job(rec, "a", "final", 2, 2.0)
    j.prepare = prepare
    w.submit(j)
    state["prompt"] = "new"  # changes after submission, before the job starts
    w.run_pending()
    assert rec.outcomes[0].error is not None and rec.outcomes[0].result is None
    assert rec.outcomes[1].result is not None and rec.outcomes[1].hypothesis == (1, 2, 3)
    options = rec.outcomes[1].options
    assert options is not None and options.prompt_ids == tuple(ord(c) for c in "new")
    assert w.total_stats().errors == 1


def test_stop_drains_finals_and_drops_partials() -> None:
    gate = threading.Event()
    engine = FakeEngine(gate)
    rec = Recorder()
    w = InferenceWorker(engine).start()  # type: ignore[arg-type]
    w.submit(job(rec, "a", "final", 1))
    assert engine.started.wait(5)
    w.submit(job(rec, "a", "partial", 2))
    w.submit(job(rec, "a", "final", 2))
    w.submit(job(rec, "b", "partial", 1))
    threading.Timer(0.2, gate.set).start()
    w.stop(timeout=10)
    assert [d for d in rec.done if not d[3]] == [("a", "final", 1, False), ("a", "final", 2, False)]
    assert sorted(d[0] for d in rec.done if d[3]) == ["a", "b"]


def test_simulated_clock_is_charged_with_the_compute() -> None:
    clock = SimulatedClock()
    rec = Recorder()
    w = InferenceWorker(FakeEngine(cost=0.05))  # type: ignore[arg-type]
    j = job(rec, "a", "final", 1)
    j.clock = clock
    w.submit(j)
    w.run_one()
    assert clock.now() >= 0.05 and rec.outcomes[0].compute_s >= 0.05
    with pytest.raises(RuntimeError):
        w.start()
        try:
            w.run_one()
        finally:
            w.stop()


# --------------------------------------------------------------------------- real model


@pytest.fixture(scope="module")
def engine():  # type: ignore[no-untyped-def]
    from streamcap.runtime.engine import Engine

    return Engine("base")


@pytest.mark.model
def test_shortened_encoder_context(engine) -> None:  # type: ignore[no-untyped-def]
    from streamcap.runtime.engine import options_for

    audio = load_audio(DATA / "en_real_jfk.wav")
    full = encode_window(engine, audio, None)
    same = encode_window(engine, audio, 30.0)
    assert torch.equal(full.enc, same.enc)
    short = encode_window(engine, audio[: 4 * SR], 6.0)
    assert short.enc.shape == (1, 300, full.enc.shape[2])
    text = engine.decode(short, options_for(engine, "en", "transcribe")).text.lower()
    assert "fellow americans" in text


@pytest.mark.model
def test_worker_final_equals_plain_greedy(engine) -> None:  # type: ignore[no-untyped-def]
    """A final decoded through the worker, drafting from a partial's tokens, is token for
    token what plain greedy `generate` gives on the same audio and options."""
    from streamcap.decoding.reference import reference_decode
    from streamcap.runtime.engine import options_for

    audio = load_audio(DATA / "en_real_librivox_0870.wav")
    opts = options_for(engine, "en", "transcribe")
    rec = Recorder()
    w = InferenceWorker(engine)
    partial = job(rec, "a", "partial", 1)
    partial.audio = audio[: 5 * SR]
    partial.options = opts
    partial.context_s = 7.0
    w.submit(partial)
    w.run_pending()
    hyp = rec.outcomes[0].result.tokens  # type: ignore[union-attr]
    final = job(rec, "a", "final", 1)
    final.audio, final.options, final.hypothesis = audio, opts, hyp
    w.submit(final)
    w.run_pending()
    got = rec.outcomes[1].result
    assert got is not None and got.stats.accepted > 0  # the partial's tokens were drafted
    enc = engine.encode(audio)
    ref, _ = reference_decode(engine.decoder, enc.enc, opts, enc.duration_s)
    assert tuple(ref) == got.tokens
    assert "dashwood" in got.text.lower()
