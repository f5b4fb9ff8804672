"""Prometheus metrics of one caption server (its own registry, so several servers can coexist).

Counters and histograms that the server updates as things happen live here; values owned by
others (connected streams and viewers, the inference worker's queue and token counts) are read
at scrape time by a collector, so nothing has to be kept in sync: the worker's come from one
typed snapshot (`Worker.total_stats()`, `runtime.worker_api`), read field by field. No
per-stream labels: stream ids come from clients, and a label per id would grow without bound.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    InfoMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from streamcap.runtime.memory import heap_figures

if TYPE_CHECKING:
    from streamcap.runtime.worker_api import ModelInfo, Worker

#: Content type of the text exposition format.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

#: Final latency buckets (seconds): the target is p95 < 2 s.
LATENCY_BUCKETS = (0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 30.0)

#: Reasons a connection is refused or closed by the server (a fixed set: bounded labels).
CLOSE_REASONS = (
    "auth", "origin", "bad_path", "bad_data", "too_big", "flood", "idle", "limit", "busy",
    "slow_viewer", "unknown_stream", "internal", "host", "start_timeout", "connections",
    "shutdown", "full", "handshake_timeout", "downloads",
)  # fmt: skip

Snapshot = Callable[[], Mapping[str, float]]
#: The remote backend's figures (`Worker.remote_snapshot`; None: the worker has no replicas).
RemoteSnapshot = Callable[[], Mapping[str, Any] | None]


def engine_info(engine: ModelInfo) -> dict[str, str]:
    """Model, device and precision of the worker's engine, for `streamcap_engine_info`."""
    return {
        "model": str(engine.main.name),
        "device": str(engine.placement.device),
        "precision": str(engine.placement.precision),
    }


def worker_snapshot(worker: Worker) -> dict[str, float]:
    """The worker's totals under the keys the collector publishes (one snapshot, one lock)."""
    s = worker.total_stats()
    return {
        "queue_depth": float(s.queue_depth),
        "decode_seconds": s.compute_s,
        "encoder_seconds": s.decode.encoder_s,
        "decoder_seconds": s.decode.decoder_s,
        "drafted_tokens": float(s.decode.drafted),
        "accepted_tokens": float(s.decode.accepted),
        "forward_passes": float(s.decode.forward_passes),
        "jobs": float(s.jobs),
        "partials_dropped": float(s.dropped_partials),
        "final_queue_wait_seconds": s.final_queue_wait_s,
        "partial_queue_wait_seconds": s.queue_wait_s - s.final_queue_wait_s,
        "finals": float(s.finals),
        "partials": float(s.partials),
    }


class _LiveCollector(Collector):
    """Gauges and worker counters computed when Prometheus scrapes."""

    def __init__(
        self,
        hub: Snapshot,
        worker: Snapshot,
        info: Mapping[str, str],
        remote: RemoteSnapshot | None = None,
    ) -> None:
        self._hub = hub
        self._worker = worker
        self._info = dict(info)
        self._remote = remote

    def collect(self) -> Iterator[Metric]:
        hub = self._hub()
        yield GaugeMetricFamily(
            "streamcap_streams", "Streams with a publisher connected", value=hub.get("streams", 0)
        )
        yield GaugeMetricFamily(
            "streamcap_publishers",
            "Publishers connected (a stream is a room: it may have several speakers)",
            value=hub.get("publishers", 0),
        )
        yield GaugeMetricFamily(
            "streamcap_streams_retained",
            "Streams kept in memory for replay and SRT/VTT (live and ended)",
            value=hub.get("retained", 0),
        )
        yield GaugeMetricFamily(
            "streamcap_viewers", "Caption viewers connected", value=hub.get("viewers", 0)
        )
        yield GaugeMetricFamily(
            "streamcap_finals_in_memory",
            "Caption events the streams' logs hold in memory (older finals: the recording)",
            value=hub.get("finals_in_memory", 0),
        )
        heap = heap_figures()
        if heap:
            family = GaugeMetricFamily(
                "streamcap_heap_bytes",
                "The C heap (glibc malloc): in use, free inside its arenas, mmapped",
                labels=["kind"],
            )
            for kind, value in heap.items():
                family.add_metric([kind], value)
            yield family
        w = self._worker()
        if "precision" in self._info:
            yield InfoMetricFamily(
                "streamcap_engine", "The model, device and precision in use", value=self._info
            )
        if "queue_depth" in w:
            yield GaugeMetricFamily(
                "streamcap_queue_depth",
                "Decode jobs waiting for the worker",
                value=w["queue_depth"],
            )
        for key, name, doc in (
            ("decode_seconds", "streamcap_decode_seconds", "Worker time spent decoding"),
            ("encoder_seconds", "streamcap_encoder_seconds", "Worker time in the encoder"),
            ("decoder_seconds", "streamcap_decoder_seconds", "Worker time in the decoder"),
            ("drafted_tokens", "streamcap_drafted_tokens", "Draft tokens proposed"),
            ("accepted_tokens", "streamcap_accepted_tokens", "Draft tokens accepted"),
            ("forward_passes", "streamcap_forward_passes", "Main model decoder forward passes"),
            ("jobs", "streamcap_decode_jobs", "Decode jobs run by the worker"),
            ("partials_dropped", "streamcap_stale_partials_dropped", "Stale partial jobs dropped"),
        ):
            if key in w:
                yield CounterMetricFamily(name, doc, value=w[key])
        if "finals" in w:
            wait = CounterMetricFamily(
                "streamcap_queue_wait_seconds",
                "Time decode jobs waited for the worker, by kind",
                labels=["kind"],
            )
            jobs = CounterMetricFamily(
                "streamcap_decodes", "Decodes run by the worker, by kind", labels=["kind"]
            )
            for kind in ("final", "partial"):
                wait.add_metric([kind], w[f"{kind}_queue_wait_seconds"])
                jobs.add_metric([kind], w[f"{kind}s"])
            yield wait
            yield jobs
        sizes = sorted(int(k[len("batches_b") :]) for k in w if k.startswith("batches_b"))
        if sizes:
            batches = CounterMetricFamily(
                "streamcap_batches", "Decodes run together, by batch size", labels=["size"]
            )
            for b in sizes:
                batches.add_metric([str(b)], w[f"batches_b{b}"])
            yield batches
        for key, name, doc in (
            ("load_busy", "streamcap_worker_load", "Worker seconds per second, last minute"),
            (
                "load_finals",
                "streamcap_worker_finals_load",
                "Worker seconds per second spent on finals, last minute",
            ),
            (
                "stream_finals_load",
                "streamcap_stream_finals_load",
                "Finals' worker seconds per stream second (what admission control uses)",
            ),
            ("capacity_streams", "streamcap_capacity_streams", "Live streams the worker carries"),
            (
                "final_wait_p95",
                "streamcap_final_wait_p95_seconds",
                "Queue wait of the latest finals, 95th percentile",
            ),
            ("accepting", "streamcap_accepting_streams", "1 if a new publisher would be admitted"),
            (
                "batch_size_mean",
                "streamcap_batch_size_mean",
                "Mean decoder batch size, last minute",
            ),
        ):
            if key in w:
                yield GaugeMetricFamily(name, doc, value=w[key])
        yield finals_dropped_family()
        remote = self._remote() if self._remote is not None else None
        if remote is not None:
            yield from remote_families(remote)


def finals_dropped_family() -> Metric:
    """``streamcap_finals_dropped_total{reason}``: voiced finals of this process's live streams
    that ended with no text (`LiveStream.drops`; every reason listed, zero until one happens)."""
    from streamcap.core.policy import NOT_DECODED
    from streamcap.core.text import DROP_REASONS
    from streamcap.runtime.stream import finals_dropped

    counts = finals_dropped()
    family = CounterMetricFamily(
        "streamcap_finals_dropped",
        "Voiced finals that ended with no text, by reason (hallucination guard, no decode)",
        labels=["reason"],
    )
    for reason in dict.fromkeys([*DROP_REASONS, NOT_DECODED, *counts]):
        family.add_metric([reason], counts.get(reason, 0))
    return family


def remote_families(r: Mapping[str, Any]) -> Iterator[Metric]:
    """The Ray backend (`cluster.remote.RemoteWorker.remote_snapshot`): the cluster, the
    gateway's retries and losses, and one series per replica (replicas are few and come and
    go: the gateway keeps the latest 64)."""
    yield GaugeMetricFamily(
        "streamcap_cluster_connected", "1 while the Ray cluster answers", value=r["connected"]
    )
    yield GaugeMetricFamily(
        "streamcap_replicas_running", "Inference replicas running", value=r["running"]
    )
    yield GaugeMetricFamily(
        "streamcap_replicas_target", "Inference replicas asked for", value=r["target"]
    )
    yield GaugeMetricFamily(
        "streamcap_fallback_active",
        "1 while decodes go to the local fallback",
        value=float(r["fallback_active"]),
    )
    inflight = GaugeMetricFamily(
        "streamcap_remote_inflight", "Requests sent and not yet answered", labels=["kind"]
    )
    retries = CounterMetricFamily(
        "streamcap_remote_retries", "Lost finals resent to another replica", labels=["kind"]
    )
    for kind in ("final", "partial"):
        inflight.add_metric([kind], r["inflight"].get(kind, 0))
    retries.add_metric(["final"], r["retries"].get("final", 0))
    retries.add_metric(["partial"], r["retries"].get("partial_dropped", 0))
    yield inflight
    yield retries
    lost = CounterMetricFamily(
        "streamcap_remote_lost", "Requests that got no reply, by reason", labels=["reason"]
    )
    for reason, n in sorted(r["lost"].items()):
        lost.add_metric([reason], n)
    yield lost
    for key, name, doc in (
        ("duplicates", "streamcap_remote_duplicates_ignored", "Second replies to one request"),
        ("fallback_jobs", "streamcap_fallback_decodes", "Decodes sent to the local fallback"),
        ("deadline_errors", "streamcap_remote_final_timeouts", "Finals given up undecoded"),
    ):
        yield CounterMetricFamily(name, doc, value=r[key])
    yield GaugeMetricFamily(
        "streamcap_remote_transport_p95_seconds",
        "Round trip minus the replica's own time, 95th percentile of the latest requests",
        value=r["transport_p95_s"],
    )
    info = InfoMetricFamily("streamcap_replica", "An inference replica", labels=["replica"])
    alive = GaugeMetricFamily("streamcap_replica_alive", "1 while it runs", labels=["replica"])
    busy = GaugeMetricFamily(
        "streamcap_replica_inflight", "Requests on it now", labels=["replica", "kind"]
    )
    jobs = CounterMetricFamily(
        "streamcap_replica_decodes", "Decodes it answered", labels=["replica", "kind"]
    )
    compute = CounterMetricFamily(
        "streamcap_replica_compute_seconds", "Its decode time", labels=["replica"]
    )
    for rep in r["replicas"]:
        rid = str(rep["replica"])
        info.add_metric([rid], {k: str(rep[k]) for k in ("pid", "node", "device", "precision")})
        alive.add_metric([rid], float(rep["alive"]))
        for kind in ("final", "partial"):
            busy.add_metric([rid, kind], rep[f"inflight_{kind}"])
            jobs.add_metric([rid, kind], rep[f"{kind}s"])
        compute.add_metric([rid], rep["compute_s"])
    yield from (info, alive, busy, jobs, compute)


class ServerMetrics:
    """The server's metrics, in a registry of their own."""

    def __init__(
        self,
        hub: Snapshot,
        worker: Snapshot,
        info: Mapping[str, str] | None = None,
        remote: RemoteSnapshot | None = None,
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.registry.register(_LiveCollector(hub, worker, info or {}, remote))
        ProcessCollector(registry=self.registry)  # process_resident_memory_bytes, CPU, fds
        r = self.registry
        self.audio_seconds = Counter(
            "streamcap_audio_seconds", "Audio received from publishers (seconds)", registry=r
        )
        self.captions = Counter(
            "streamcap_captions", "Caption events emitted", ["type"], registry=r
        )
        self.final_latency = Histogram(
            "streamcap_final_latency_seconds",
            "Latency of final captions as reported by the pipeline",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.events_sent = Counter(
            "streamcap_events_sent", "Caption events sent to viewers", registry=r
        )
        self.connections = Counter(
            "streamcap_connections", "WebSocket connections accepted", ["route"], registry=r
        )
        self.closed = Counter(
            "streamcap_connections_refused",
            "Connections refused or closed by the server",
            ["reason"],
            registry=r,
        )
        self.http_requests = Counter(
            "streamcap_http_requests", "Plain HTTP requests", ["status"], registry=r
        )
        for reason in CLOSE_REASONS:
            self.closed.labels(reason)
        for kind in ("partial", "final"):
            self.captions.labels(kind)
        for route in ("ingest", "captions"):
            self.connections.labels(route)

    def refuse(self, reason: str) -> None:
        self.closed.labels(reason if reason in CLOSE_REASONS else "internal").inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
