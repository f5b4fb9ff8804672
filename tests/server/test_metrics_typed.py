"""/metrics of a real server on loopback, read from typed snapshots (issue 36).

The collector reads one frozen snapshot per source: the streams (`hub.HubFigures`), the worker
(`metrics.WorkerFigures`: `WorkerStats`, load, admission, `BatchFigures`) and the remote
backend (`RemoteStatus`). These tests scrape the text exposition of a real `CaptionServer`
(real sockets on 127.0.0.1, a real publisher and viewer) and check that every family the
collector publishes is there with exactly its labels, and that each value is the typed
snapshot's field. The worker is the real scheduler core without a model (`FakeWorker`) or the
real Ray gateway (`RemoteWorker`) on a transport the test operates by hand: it stands in for
the network and the replicas only (tests/cluster/test_ray_backend.py has real ones).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import fields, replace

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample
from serverkit import PUB, START, VIEW, Collector, FakeWorker, NoModel, fake_factory, http_get
from serverkit import ingest as connect_ingest
from typing_extensions import get_protocol_members

from streamcap.cluster.remote import RemoteWorker
from streamcap.cluster.remote_config import RemoteConfig
from streamcap.cluster.transport import (
    Described,
    Lost,
    OnEvent,
    Replied,
    Routed,
    Status,
    TransportEvent,
)
from streamcap.cluster.wire import ReplicaInfo, ReplicaReply, ReplicaRequest
from streamcap.core.decode_types import DecodeResult
from streamcap.runtime.jobs import DecodeJob, JobKind, JobOutcome
from streamcap.runtime.worker_api import StreamWorker, Worker, WorkerLifecycle, WorkerStatus
from streamcap.runtime.worker_status import BatchFigures, RemoteStatus, ReplicaStatus
from streamcap.server.config import ServerConfig
from streamcap.server.hub import HubFigures
from streamcap.server.metrics import ServerMetrics, remote_families
from streamcap.server.thread import ServerThread

SR = 16000

#: what the live collector publishes of the streams and the worker: family -> label names
#: (`streamcap_batches` and `streamcap_batch_size_mean` once a batch ran)
LIVE_FAMILIES = {
    "streamcap_streams": (),
    "streamcap_publishers": (),
    "streamcap_streams_retained": (),
    "streamcap_viewers": (),
    "streamcap_finals_in_memory": (),
    "streamcap_engine_info": ("device", "model", "precision"),
    "streamcap_queue_depth": (),
    "streamcap_decode_seconds": (),
    "streamcap_encoder_seconds": (),
    "streamcap_decoder_seconds": (),
    "streamcap_drafted_tokens": (),
    "streamcap_accepted_tokens": (),
    "streamcap_forward_passes": (),
    "streamcap_decode_jobs": (),
    "streamcap_stale_partials_dropped": (),
    "streamcap_queue_wait_seconds": ("kind",),
    "streamcap_decodes": ("kind",),
    "streamcap_batches": ("size",),
    "streamcap_worker_load": (),
    "streamcap_worker_finals_load": (),
    "streamcap_stream_finals_load": (),
    "streamcap_capacity_streams": (),
    "streamcap_final_wait_p95_seconds": (),
    "streamcap_accepting_streams": (),
    "streamcap_batch_size_mean": (),
}

#: what it publishes of a remote backend (`remote_families`)
REMOTE_FAMILIES = {
    "streamcap_cluster_connected": (),
    "streamcap_replicas_running": (),
    "streamcap_replicas_target": (),
    "streamcap_fallback_active": (),
    "streamcap_remote_inflight": ("kind",),
    "streamcap_remote_retries": ("kind",),
    "streamcap_remote_lost": ("reason",),
    "streamcap_remote_duplicates_ignored": (),
    "streamcap_fallback_decodes": (),
    "streamcap_remote_final_timeouts": (),
    "streamcap_remote_transport_p95_seconds": (),
    "streamcap_replica_info": ("node", "pid", "precision", "device", "replica"),
    "streamcap_replica_alive": ("replica",),
    "streamcap_replica_inflight": ("kind", "replica"),
    "streamcap_replica_decodes": ("kind", "replica"),
    "streamcap_replica_compute_seconds": ("replica",),
}


def scrape(srv: ServerThread) -> dict[str, list[Sample]]:
    """The server's /metrics, parsed: family name -> its samples (``_created`` left out)."""
    status, ctype, body = http_get(srv.url("/metrics"))
    assert status == 200 and ctype.startswith("text/plain"), body
    return {
        f.name: [s for s in f.samples if not s.name.endswith("_created")]
        for f in text_string_to_metric_families(body)
    }


def value(families: dict[str, list[Sample]], name: str, **labels: str) -> float:
    (match,) = [s.value for s in families[name] if s.labels == labels]
    return match


def job(stream: str, kind: JobKind, told: list[JobOutcome], window: int = 1) -> DecodeJob:
    """A job of ``kind`` for ``stream``; its outcome goes to ``told``."""
    audio = np.zeros(SR, np.float32)
    return DecodeJob(stream, kind, window, audio, lambda j, o: told.append(o))


def label_names(samples: list[Sample]) -> set[frozenset[str]]:
    return {frozenset(s.labels) for s in samples}


def test_the_worker_port_is_three_ports_by_audience() -> None:
    """A stream submits and waits; the server's status reads; the owner runs the worker. The
    whole `Worker` is exactly the three, and nothing of the tokenizer or the cost model."""
    stream = get_protocol_members(StreamWorker)
    status = get_protocol_members(WorkerStatus)
    lifecycle = get_protocol_members(WorkerLifecycle)
    assert stream == {"submit", "wait_idle", "threaded", "final_cost_s"}
    assert {"engine", "total_stats", "load", "admission", "batch_figures"} <= status
    assert {"health", "usable", "remote_status", "queue_depth", "idle"} <= status
    assert lifecycle == {"start", "stop", "run_one", "run_pending", "warm_up", "streams_changed"}
    assert get_protocol_members(Worker) == stream | status | lifecycle
    assert not {"text_to_ids", "costs", "remote_snapshot"} & get_protocol_members(Worker)
    assert isinstance(FakeWorker(), Worker)


def test_metrics_of_a_live_server_come_from_its_typed_snapshots() -> None:
    worker = FakeWorker()
    for size in (1, 1, 3):  # the worker's own cost model, as its job thread would count
        worker.costs.observe_batch(size)
    told: list[JobOutcome] = []
    for window in (1, 2):  # the second partial of a stream drops the first: books move
        worker.submit(job("x", "partial", told, window))
    config = ServerConfig(port=0, publish_token=PUB, view_token=VIEW)
    with ServerThread(config, worker, stream_factory=fake_factory) as srv:
        viewer = Collector(srv, "room")
        with connect_ingest(srv, "room") as ws:
            ws.send(json.dumps(START))
            assert json.loads(ws.recv(timeout=10))["type"] == "ready"
            ws.send(np.zeros(1600, "<i2").tobytes())  # `FakeStream`: one final per feed
            assert viewer.wait_for(lambda v: v.finals(), 10), viewer.events
            families = scrape(srv)
            stats = worker.total_stats()
            assert srv.server is not None
            hub = srv.server.hub.figures()
        viewer.stop()
    worker.stop()
    assert [o.dropped for o in told] == [True, True]  # told at the stop

    for name, labels in LIVE_FAMILIES.items():
        assert label_names(families[name]) == {frozenset(labels)}, name
    assert not set(REMOTE_FAMILIES) & set(families)  # a local worker: no cluster

    assert hub == HubFigures(streams=1, publishers=1, viewers=1, retained=1, finals_in_memory=1)
    for field, name in (
        ("streams", "streamcap_streams"),
        ("publishers", "streamcap_publishers"),
        ("viewers", "streamcap_viewers"),
        ("retained", "streamcap_streams_retained"),
        ("finals_in_memory", "streamcap_finals_in_memory"),
    ):
        assert value(families, name) == getattr(hub, field), name

    assert (stats.queue_depth, stats.dropped_partials, stats.jobs) == (1, 1, 0)
    assert value(families, "streamcap_queue_depth") == 1  # the newer partial
    assert value(families, "streamcap_stale_partials_dropped") == 1
    assert value(families, "streamcap_decodes", kind="final") == stats.finals == 0
    batches = worker.batch_figures()
    assert batches == BatchFigures(batches={1: 2, 3: 1}) and batches.mean_size == pytest.approx(
        5 / 3
    )
    assert {s.labels["size"]: s.value for s in families["streamcap_batches"]} == {"1": 2, "3": 1}
    assert value(families, "streamcap_batch_size_mean") == pytest.approx(batches.mean_size)
    admission = worker.admission(1)
    assert value(families, "streamcap_accepting_streams") == float(admission.ok)
    assert value(families, "streamcap_capacity_streams") == min(
        admission.capacity, config.max_streams
    )
    engine = {"model": "none", "device": "none", "precision": "none"}  # `NoModel`
    assert value(families, "streamcap_engine_info", **engine) == 1


def test_the_metrics_of_a_worker_without_a_batch_have_no_mean() -> None:
    config = ServerConfig(port=0, publish_token=PUB, view_token=VIEW)
    with ServerThread(config, FakeWorker(), stream_factory=fake_factory) as srv:
        families = scrape(srv)
    assert "streamcap_batches" not in families and "streamcap_batch_size_mean" not in families
    assert (
        value(families, "streamcap_queue_depth") == 0 and value(families, "streamcap_viewers") == 0
    )


def test_metrics_without_sources_still_list_the_counters() -> None:
    body = ServerMetrics().render().decode()
    assert "streamcap_finals_dropped_total" in body and "streamcap_streams " not in body


# --------------------------------------------------------------------------- remote backend


class HandTransport:
    """A transport the test operates (module docstring): it keeps what is sent."""

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

    def event(self, event: TransportEvent) -> None:
        assert self.on_event is not None
        self.on_event(event)

    def wait_sent(self, n: int) -> list[ReplicaRequest]:
        with self.changed:
            assert self.changed.wait_for(lambda: len(self.sent) >= n, 10), self.sent
            return list(self.sent)


@pytest.fixture
def remote() -> Iterator[tuple[RemoteWorker, HandTransport]]:
    transport = HandTransport()
    worker = RemoteWorker(NoModel(), transport, config=RemoteConfig(replica_inflight=2))
    worker.connect()
    worker.start()
    try:
        yield worker, transport
    finally:
        worker.stop(timeout=2, drain=False)


def test_remote_metrics_are_the_gateways_typed_status(
    remote: tuple[RemoteWorker, HandTransport],
) -> None:
    worker, t = remote
    r0 = ReplicaInfo("r0", pid=11, node="n0", device="cpu", precision="fp32")
    t.event(Status(True, 2, 3, frozenset({"r0", "r1"})))
    t.event(Described(r0))
    told: list[JobOutcome] = []
    for stream in ("a", "b", "c"):
        worker.submit(job(stream, "final", told))
    worker.submit(job("d", "partial", told))
    sent = t.wait_sent(4)
    (a, b, c), (d,) = [[r for r in sent if r.kind == kind] for kind in ("final", "partial")]
    result = DecodeResult((1,), "x", "en", 0.0, 0.0, "eot")
    t.event(Replied(ReplicaReply(a.key, r0, result, compute_s=0.25)))
    t.event(Replied(ReplicaReply(a.key, r0, result, compute_s=0.25)))  # a second reply: ignored
    t.event(Lost(d.key, "died", "killed", "r1"))  # the partial: dropped
    t.event(Lost(b.key, "timeout", "slow", "r0"))  # a final: resent
    t.event(Routed(c.key, "r0"))  # the router says where ``c`` went
    t.wait_sent(5)  # ``b`` again
    deadline = time.monotonic() + 10
    while len(told) < 2 and time.monotonic() < deadline:  # ``a`` and ``d``
        time.sleep(0.02)
    status = worker.remote_status()
    assert (status.finals_resent, status.partials_lost, status.duplicates) == (1, 1, 1)
    assert dict(status.lost) == {"died": 1, "timeout": 1}
    assert (status.inflight_finals, status.inflight_partials) == (2, 0)  # ``b`` and ``c``
    (replica,) = status.replicas
    assert (replica.replica, replica.finals, replica.compute_s) == ("r0", 1, 0.25)
    assert (replica.inflight_finals, replica.inflight_partials) == (1, 0)  # ``c``

    config = ServerConfig(port=0, publish_token=PUB, view_token=VIEW)
    with ServerThread(config, worker) as srv:
        families = scrape(srv)
    assert worker.remote_status() == status  # nothing moved while it was scraped
    for name, labels in REMOTE_FAMILIES.items():
        assert label_names(families[name]) == {frozenset(labels)}, name
    assert value(families, "streamcap_cluster_connected") == 1
    assert value(families, "streamcap_replicas_running") == status.running == 2
    assert value(families, "streamcap_replicas_target") == status.target == 3
    assert value(families, "streamcap_fallback_active") == 0
    assert value(families, "streamcap_remote_inflight", kind="final") == 2
    assert value(families, "streamcap_remote_inflight", kind="partial") == 0
    assert value(families, "streamcap_remote_retries", kind="final") == 1
    assert value(families, "streamcap_remote_retries", kind="partial") == 1
    lost = {s.labels["reason"]: s.value for s in families["streamcap_remote_lost"]}
    assert lost == dict(status.lost)
    assert value(families, "streamcap_remote_duplicates_ignored") == 1
    assert value(families, "streamcap_fallback_decodes") == status.fallback_jobs == 0
    assert value(families, "streamcap_remote_final_timeouts") == status.deadline_errors == 0
    labels = {"replica": "r0", "pid": "11", "node": "n0", "device": "cpu", "precision": "fp32"}
    assert value(families, "streamcap_replica_info", **labels) == 1
    assert value(families, "streamcap_replica_alive", replica="r0") == 1
    assert value(families, "streamcap_replica_decodes", replica="r0", kind="final") == 1
    assert value(families, "streamcap_replica_decodes", replica="r0", kind="partial") == 0
    assert value(families, "streamcap_replica_inflight", replica="r0", kind="final") == 1
    assert value(families, "streamcap_replica_inflight", replica="r0", kind="partial") == 0
    assert value(families, "streamcap_replica_compute_seconds", replica="r0") == 0.25


def test_remote_families_read_every_field_of_the_status() -> None:
    """Each field of `RemoteStatus` changes what is published (none is left unread)."""
    base = RemoteStatus(
        connected=True,
        running=1,
        target=1,
        fallback_active=False,
        inflight_finals=0,
        inflight_partials=0,
        finals_resent=0,
        partials_lost=0,
        lost={},
        duplicates=0,
        fallback_jobs=0,
        deadline_errors=0,
        transport_p50_s=0.0,
        transport_p95_s=0.0,
    )
    changed = {f.name: 7 for f in fields(RemoteStatus)}
    changed.update(connected=False, fallback_active=True, lost={"bridge": 1}, replicas=REPLICA)
    del changed["transport_p50_s"]  # for reports: not published

    def published(status: RemoteStatus) -> list[tuple[str, dict[str, str], float]]:
        return [(s.name, s.labels, s.value) for f in remote_families(status) for s in f.samples]

    for name, new in changed.items():
        assert published(replace(base, **{name: new})) != published(base), name
    one = published(replace(base, replicas=REPLICA))
    (replica,) = REPLICA
    for field in fields(ReplicaStatus):  # and each field of a replica but its deaths (reports)
        if field.name == "lost":
            continue
        new = not replica.alive if field.name == "alive" else type(getattr(replica, field.name))(9)
        assert published(replace(base, replicas=(replace(replica, **{field.name: new}),))) != one


REPLICA = (
    ReplicaStatus(
        replica="r0",
        pid=1,
        node="n",
        device="cpu",
        precision="fp32",
        alive=True,
        finals=1,
        partials=2,
        compute_s=0.5,
        lost=0,
        inflight_finals=1,
        inflight_partials=0,
    ),
)
