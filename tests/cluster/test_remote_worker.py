"""The gateway's scheduler for remote decodes (`streamcap.cluster.remote.RemoteWorker`).

Two layers, as for the local worker:
- the rules, driven through a hand-operated transport (`Manual`): the test decides when each
  request is answered, lost, or routed, and what the cluster's status is. It stands in for the
  network only; the real thing (Ray Serve replicas, a replica killed for real) is
  tests/cluster/test_ray_backend.py;
- the whole path over the in-process `LocalTransport` (the ``--fallback local`` transport) with
  the bundled model on real speech: every final equals plain greedy `generate`.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np
import pytest

from streamcap.cluster.remote import RemoteUnavailable, RemoteWorker
from streamcap.cluster.remote_config import RemoteConfig
from streamcap.cluster.transport import Lost, OnEvent, Replied, Routed, Status
from streamcap.cluster.wire import ReplicaInfo, ReplicaReply, ReplicaRequest
from streamcap.core.decode_types import DecodeResult, DecodingOptions
from streamcap.runtime.jobs import DecodeJob, JobOutcome

SR = 16000


class Manual:
    """A transport the test operates by hand (module docstring)."""

    def __init__(self) -> None:
        self.sent: list[ReplicaRequest] = []
        self.on_event: OnEvent | None = None
        self.changed = threading.Condition()

    def start(self, on_event: OnEvent) -> None:
        self.on_event = on_event

    def send(self, request: ReplicaRequest) -> None:
        with self.changed:
            self.sent.append(request)
            self.changed.notify_all()

    def close(self) -> None:
        pass

    def status(self, running: int, connected: bool = True) -> None:
        assert self.on_event is not None
        ids = frozenset(f"r{i}" for i in range(running))
        self.on_event(Status(connected, running, running, ids))

    def wait_sent(self, n: int, timeout: float = 5.0) -> list[ReplicaRequest]:
        with self.changed:
            assert self.changed.wait_for(lambda: len(self.sent) >= n, timeout), self.sent
            return list(self.sent)

    def reply(self, request: ReplicaRequest, text: str = "", replica: str = "r0") -> None:
        assert self.on_event is not None
        result = DecodeResult((1, 2), text or request.key, "en", 0.0, 0.0, "eot")
        info = ReplicaInfo(replica=replica, pid=1234)
        self.on_event(Replied(ReplicaReply(request.key, info, result, compute_s=0.01)))

    def lose(self, request: ReplicaRequest, reason: str = "died", replica: str = "r0") -> None:
        assert self.on_event is not None
        self.on_event(Lost(request.key, reason, "killed", replica))


class Outcomes:
    """on_done of every job, in the order the worker told them."""

    def __init__(self) -> None:
        self.told: list[tuple[DecodeJob, JobOutcome]] = []
        self.cond = threading.Condition()

    def __call__(self, job: DecodeJob, outcome: JobOutcome) -> None:
        with self.cond:
            self.told.append((job, outcome))
            self.cond.notify_all()

    def wait(self, n: int, timeout: float = 5.0) -> list[tuple[DecodeJob, JobOutcome]]:
        with self.cond:
            assert self.cond.wait_for(lambda: len(self.told) >= n, timeout), self.told
            return list(self.told)

    def of(self, job: DecodeJob) -> list[JobOutcome]:
        return [o for j, o in self.told if j is job]


def make_job(stream: str, kind: str, window: int, on_done: Any, n: int = SR) -> DecodeJob:
    return DecodeJob(stream=stream, kind=kind, window=window,  # type: ignore[arg-type]
                     audio=np.zeros(n, np.float32), on_done=on_done,
                     options=DecodingOptions(language="en"))  # fmt: skip


def started(
    config: RemoteConfig | None = None, fallback: Any = None
) -> tuple[RemoteWorker, Manual]:
    transport = Manual()
    worker = RemoteWorker(None, transport, config=config, fallback=fallback)
    worker.connect()
    worker.start()
    return worker, transport


def test_nothing_is_sent_without_a_replica_and_finals_go_first_when_one_comes() -> None:
    told = Outcomes()
    worker, t = started(RemoteConfig(replica_inflight=2))
    try:
        p = worker.submit(make_job("a", "partial", 1, told))
        f = worker.submit(make_job("b", "final", 1, told))
        time.sleep(0.3)
        assert t.sent == []  # no usable replica: everything waits in the gateway
        assert worker.queue_depth == 2
        t.status(running=1)
        sent = t.wait_sent(2)
        assert [r.kind for r in sent] == ["final", "partial"]  # finals first
        t.reply(sent[1])
        t.reply(sent[0])
        told.wait(2)
        assert told.of(f)[0].result is not None and told.of(p)[0].result is not None
        assert worker.idle()
    finally:
        worker.stop(timeout=5)


def test_in_flight_is_bounded_per_replica_and_a_slot_is_kept_for_finals() -> None:
    told = Outcomes()
    worker, t = started(RemoteConfig(replica_inflight=2))
    try:
        t.status(running=2)
        for s in "abcdef":
            worker.submit(make_job(s, "partial", 1, told))
        time.sleep(0.3)
        assert len(t.sent) == 2  # 2 replicas x 2 slots, partials at most 4 - 2
        worker.submit(make_job("g", "final", 1, told))
        worker.submit(make_job("h", "final", 1, told))
        sent = t.wait_sent(4)
        assert [r.kind for r in sent[2:]] == ["final", "final"]
        time.sleep(0.2)
        assert len(t.sent) == 4  # full: the rest waits
        t.reply(sent[0])
        assert t.wait_sent(5)[4].kind == "partial"
        assert worker.queue_depth == 3
    finally:
        worker.stop(timeout=1, drain=False)


def test_a_newer_partial_replaces_the_waiting_one_of_its_stream() -> None:
    told = Outcomes()
    worker, t = started()
    try:
        old = worker.submit(make_job("a", "partial", 1, told))
        new = worker.submit(make_job("a", "partial", 1, told))
        told.wait(1)
        assert told.of(old)[0].dropped
        t.status(running=1)
        sent = t.wait_sent(1)
        t.reply(sent[0])
        told.wait(2)
        assert told.of(new)[0].result is not None and len(t.sent) == 1
    finally:
        worker.stop(timeout=5)


def test_a_lost_final_is_resent_identically_and_told_exactly_once() -> None:
    told = Outcomes()
    worker, t = started()
    try:
        t.status(running=2)
        f = worker.submit(make_job("a", "final", 1, told))
        first = t.wait_sent(1)[0]
        t.on_event(Routed(first.key, "r0"))  # type: ignore[misc]
        t.lose(first)
        again = t.wait_sent(2)[1]
        assert again is first  # the identical request: same key, options, hypothesis, audio
        assert worker.remote_books.finals_resent == 1 and worker.remote_books.lost["died"] == 1
        t.reply(again, "second", replica="r1")
        t.reply(first, "late reply of the dead one")  # it had finished after all
        told.wait(1)
        time.sleep(0.2)
        assert [o.result.text for o in told.of(f) if o.result] == ["second"]
        assert worker.remote_books.duplicates == 1
        status = worker.remote_status()
        assert status.finals_resent == 1 and status.duplicates == 1
    finally:
        worker.stop(timeout=5)


def test_a_lost_partial_is_dropped_not_resent() -> None:
    told = Outcomes()
    worker, t = started()
    try:
        t.status(running=1)
        p = worker.submit(make_job("a", "partial", 1, told))
        t.lose(t.wait_sent(1)[0])
        told.wait(1)
        assert told.of(p)[0].dropped and len(t.sent) == 1
        assert worker.total_stats().dropped_partials == 1
    finally:
        worker.stop(timeout=5)


def test_a_streams_finals_are_told_in_order_whichever_replica_ends_first() -> None:
    told = Outcomes()
    worker, t = started()
    try:
        t.status(running=2)
        f1 = worker.submit(make_job("a", "final", 1, told))
        f2 = worker.submit(make_job("a", "final", 2, told))
        other = worker.submit(make_job("b", "final", 1, told))
        sent = t.wait_sent(3)
        t.reply(sent[1], replica="r1")  # a's second final ends first
        t.reply(sent[2], replica="r1")
        told.wait(1)
        time.sleep(0.2)
        assert [j for j, _ in told.told] == [other]  # f2 is held until f1 is told
        t.reply(sent[0])
        told.wait(3)
        assert [j for j, _ in told.told] == [other, f1, f2]
    finally:
        worker.stop(timeout=5)


def test_a_final_that_cannot_be_decoded_in_time_is_an_error_not_silence() -> None:
    told = Outcomes()
    worker, t = started(RemoteConfig(final_deadline_s=0.5))
    try:
        f = worker.submit(make_job("a", "final", 1, told))
        told.wait(1, timeout=5)
        assert isinstance(told.of(f)[0].error, RemoteUnavailable) and t.sent == []
        assert worker.remote_books.deadline_errors == 1 and "degraded" in worker.health()
    finally:
        worker.stop(timeout=5)


def test_a_final_lost_too_often_is_given_up_as_an_error() -> None:
    told = Outcomes()
    worker, t = started(RemoteConfig(max_attempts=2))
    try:
        t.status(running=1)
        f = worker.submit(make_job("a", "final", 1, told))
        t.lose(t.wait_sent(1)[0])
        t.lose(t.wait_sent(2)[1])
        told.wait(1)
        assert isinstance(told.of(f)[0].error, RemoteUnavailable)
    finally:
        worker.stop(timeout=5)


def test_without_replicas_work_goes_to_the_fallback_and_comes_back() -> None:
    told = Outcomes()
    fallback = Manual()
    worker, t = started(RemoteConfig(fallback_after_s=0.3), fallback=fallback)
    try:
        f = worker.submit(make_job("a", "final", 1, told))
        sent = fallback.wait_sent(1)  # no replica for 0.3 s: the fallback decodes
        assert worker.remote_status().fallback_active and "fallback" in worker.health()
        fallback.reply(sent[0], replica="local")
        told.wait(1)
        assert told.of(f)[0].result is not None
        t.status(running=1)  # the replicas are back: new work goes to them
        worker.submit(make_job("a", "final", 2, told))
        assert t.wait_sent(1)[0].window == 2 and len(fallback.sent) == 1
        assert not worker.remote_status().fallback_active
    finally:
        worker.stop(timeout=1, drain=False)


def test_the_bridge_going_away_loses_in_flight_finals_which_are_resent() -> None:
    told = Outcomes()
    worker, t = started()
    try:
        t.status(running=1)
        f = worker.submit(make_job("a", "final", 1, told))
        first = t.wait_sent(1)[0]
        t.status(running=0, connected=False)
        t.lose(first, reason="bridge")
        time.sleep(0.3)
        assert len(t.sent) == 1  # waits for a replica; not lost, not sent into the void
        t.status(running=1)
        t.reply(t.wait_sent(2)[1])
        told.wait(1)
        assert told.of(f)[0].result is not None and worker.remote_books.lost["bridge"] == 1
    finally:
        worker.stop(timeout=5)


# --------------------------------------------------------------------------- real decodes


@pytest.mark.model
def test_live_stream_through_the_local_transport_gives_exact_finals(engine, speech) -> None:  # type: ignore[no-untyped-def]
    from serverkit import padded, recall

    from streamcap.cluster.transport import LocalTransport
    from streamcap.core.live_config import LiveConfig
    from streamcap.decoding.reference import reference_decode
    from streamcap.models.card import ModelCard
    from streamcap.runtime.clock import RealClock
    from streamcap.runtime.replay import replay
    from streamcap.runtime.stream import LiveStream
    from streamcap.runtime.worker import InferenceWorker

    card = ModelCard.load("base")
    assert card.text_to_ids("Kennedy, Mary.") == engine.text_to_ids("Kennedy, Mary.")
    worker = RemoteWorker(card, LocalTransport(InferenceWorker(engine)))
    worker.connect()
    worker.warm_up()
    worker.start()
    captions: list[Any] = []
    decodes: list[tuple[DecodeJob, JobOutcome]] = []
    prompt = "Kennedy's inaugural address."
    stream = LiveStream("t", worker, captions.append, LiveConfig(language="en", prompt=prompt),
                        RealClock())  # fmt: skip
    stream.decode_observer = lambda job, out: decodes.append((job, out))
    try:
        replay(stream, padded(speech["en_real_jfk"]), speed=3.0)
    finally:
        worker.stop(timeout=60)
    text = " ".join(c.text for c in captions if c.type == "final")
    assert recall(text, "ask not what your country can do for you") >= 0.9
    finals = [(j, o) for j, o in decodes if j.kind == "final" and o.result is not None]
    assert finals and any(j.kind == "partial" for j, _ in decodes)
    for job, out in finals:
        assert out.options is not None and out.result is not None
        assert out.options.prompt_ids[: len(card.text_to_ids(prompt))] == card.text_to_ids(prompt)
        enc = engine.encode(job.audio)
        ref, _ = reference_decode(engine.decoder, enc.enc, out.options, enc.duration_s)
        assert tuple(ref) == out.result.tokens
    status = worker.remote_status()
    assert status.replicas[0].finals == len(finals)
    assert (status.finals_resent, status.partials_lost, dict(status.lost)) == (0, 0, {})
