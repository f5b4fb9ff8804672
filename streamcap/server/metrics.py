"""Prometheus metrics of one caption server (its own registry, so several servers can coexist).

Counters and histograms that the server updates as things happen live here; values owned by
others (connected streams and viewers, the inference worker's queue and token counts) are read
at scrape time by a collector, so nothing has to be kept in sync. Each source hands over one
frozen snapshot read field by field, never a dict read back by key: the streams
(`hub.HubFigures`), the worker (`WorkerFigures`: its books, `runtime.jobs.WorkerStats`, with
its load, admission and batches, `runtime.worker_status.BatchFigures`), the remote backend
(`runtime.worker_status.RemoteStatus`), the caption sinks (`sinks.runner.SinkFigures`). No
per-stream labels: stream ids come from clients, and a label per id would grow without bound
(the sinks' streams are the exception: the server's configuration names them; and the streams
with enrolled voices, `voice_metrics`, which a token holder makes, at most `voices.MAX_STREAMS`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

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

from streamcap.core.policy_window import NOT_DECODED, DroppedFinal
from streamcap.core.text import DROP_REASONS
from streamcap.runtime.memory import heap_figures

if TYPE_CHECKING:
    from streamcap.core.capacity import Admission, Load
    from streamcap.runtime.jobs import WorkerStats
    from streamcap.runtime.worker_api import ModelInfo
    from streamcap.runtime.worker_status import BatchFigures, RemoteStatus
    from streamcap.sinks.runner import SinkFigures

    from .hub import HubFigures

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


@dataclass(frozen=True)
class WorkerFigures:
    """The worker as one scrape sees it (`CaptionServer._worker_metrics`): its books, its
    load, the admission decision for the live rooms now, what the server makes of it (the
    streams it carries within ``--max-streams``; whether a new publisher would be let in), and
    its decoder batches."""

    stats: WorkerStats
    load: Load
    admission: Admission
    capacity_streams: int
    accepting: bool
    batches: BatchFigures


#: What the collector reads at scrape time: the streams (`hub.Hub.figures`), the worker, the
#: remote backend (`WorkerStatus.remote_status`; None: the worker has no replicas).
HubSource = Callable[[], "HubFigures"]
WorkerSource = Callable[[], WorkerFigures]
RemoteSource = Callable[[], "RemoteStatus | None"]
#: the caption sinks (`sinks.runner.SinkRunner.figures`): one snapshot per sink
SinkSource = Callable[[], "list[SinkFigures]"]


def engine_info(engine: ModelInfo) -> dict[str, str]:
    """Model, device and precision of the worker's engine, for `streamcap_engine_info`."""
    return {
        "model": str(engine.main.name),
        "device": str(engine.placement.device),
        "precision": str(engine.placement.precision),
    }


class _LiveCollector(Collector):
    """Gauges and worker counters computed when Prometheus scrapes; a source not given
    (None) publishes nothing."""

    def __init__(
        self,
        hub: HubSource | None,
        worker: WorkerSource | None,
        info: Mapping[str, str],
        remote: RemoteSource | None = None,
        sinks: SinkSource | None = None,
    ) -> None:
        self._hub = hub
        self._worker = worker
        self._info = dict(info)
        self._remote = remote
        self._sinks = sinks

    def collect(self) -> Iterator[Metric]:
        if self._hub is not None:
            yield from hub_families(self._hub())
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
        if "precision" in self._info:
            yield InfoMetricFamily(
                "streamcap_engine", "The model, device and precision in use", value=self._info
            )
        if self._worker is not None:
            yield from worker_families(self._worker())
        remote = self._remote() if self._remote is not None else None
        if remote is not None:
            yield from remote_families(remote)
        sinks = self._sinks() if self._sinks is not None else []
        if sinks:
            yield from sink_families(sinks)


def hub_families(h: HubFigures) -> Iterator[Metric]:
    """The streams, publishers and viewers in memory (`hub.Hub.figures`)."""
    yield GaugeMetricFamily(
        "streamcap_streams", "Streams with a publisher connected", value=h.streams
    )
    yield GaugeMetricFamily(
        "streamcap_publishers",
        "Publishers connected (a stream is a room: it may have several speakers)",
        value=h.publishers,
    )
    yield GaugeMetricFamily(
        "streamcap_streams_retained",
        "Streams kept in memory for replay and SRT/VTT (live and ended)",
        value=h.retained,
    )
    yield GaugeMetricFamily("streamcap_viewers", "Caption viewers connected", value=h.viewers)
    yield GaugeMetricFamily(
        "streamcap_finals_in_memory",
        "Caption events the streams' logs hold in memory (older finals: the recording)",
        value=h.finals_in_memory,
    )


def worker_families(w: WorkerFigures) -> Iterator[Metric]:
    """The worker's queue, totals, batches, load and admission (one snapshot of its books)."""
    s = w.stats
    yield GaugeMetricFamily(
        "streamcap_queue_depth", "Decode jobs waiting for the worker", value=s.queue_depth
    )
    for name, doc, value in (
        ("streamcap_decode_seconds", "Worker time spent decoding", s.compute_s),
        ("streamcap_encoder_seconds", "Worker time in the encoder", s.decode.encoder_s),
        ("streamcap_decoder_seconds", "Worker time in the decoder", s.decode.decoder_s),
        ("streamcap_drafted_tokens", "Draft tokens proposed", s.decode.drafted),
        ("streamcap_accepted_tokens", "Draft tokens accepted", s.decode.accepted),
        ("streamcap_forward_passes", "Main model decoder forward passes", s.decode.forward_passes),
        ("streamcap_decode_jobs", "Decode jobs run by the worker", s.jobs),
        ("streamcap_stale_partials_dropped", "Stale partial jobs dropped", s.dropped_partials),
    ):
        yield CounterMetricFamily(name, doc, value=value)
    wait = CounterMetricFamily(
        "streamcap_queue_wait_seconds",
        "Time decode jobs waited for the worker, by kind",
        labels=["kind"],
    )
    wait.add_metric(["final"], s.final_queue_wait_s)
    wait.add_metric(["partial"], s.queue_wait_s - s.final_queue_wait_s)
    jobs = CounterMetricFamily(
        "streamcap_decodes", "Decodes run by the worker, by kind", labels=["kind"]
    )
    jobs.add_metric(["final"], s.finals)
    jobs.add_metric(["partial"], s.partials)
    yield wait
    yield jobs
    if w.batches.batches:
        batches = CounterMetricFamily(
            "streamcap_batches", "Decodes run together, by batch size", labels=["size"]
        )
        for size, n in sorted(w.batches.batches.items()):
            batches.add_metric([str(size)], n)
        yield batches
    gauges: list[tuple[str, str, float | None]] = [
        ("streamcap_worker_load", "Worker seconds per second, last minute", w.load.busy),
        (
            "streamcap_worker_finals_load",
            "Worker seconds per second spent on finals, last minute",
            w.load.finals,
        ),
        (
            "streamcap_stream_finals_load",
            "Finals' worker seconds per stream second (what admission control uses)",
            w.admission.per_stream,
        ),
        ("streamcap_capacity_streams", "Live streams the worker carries", w.capacity_streams),
        (
            "streamcap_final_wait_p95_seconds",
            "Queue wait of the latest finals, 95th percentile",
            w.load.final_wait_p95_s,
        ),
        ("streamcap_accepting_streams", "1 if a new publisher would be admitted", w.accepting),
        (
            "streamcap_batch_size_mean",
            "Mean decoder batch size, last minute",
            w.batches.mean_size,
        ),
    ]
    for name, doc, gauge in gauges:
        if gauge is not None:  # no batch yet: no mean
            yield GaugeMetricFamily(name, doc, value=float(gauge))


def sink_families(sinks: list[SinkFigures]) -> Iterator[Metric]:
    """The caption sinks (`sinks.runner`): one series per sink (kind and stream: they come
    from the server's configuration, not from clients, so they are few)."""
    labels = ["sink", "stream"]
    sent = CounterMetricFamily(
        "streamcap_sink_captions", "Captions a sink delivered, by type", labels=[*labels, "type"]
    )
    failed = CounterMetricFamily(
        "streamcap_sink_failures",
        "Captions a sink failed to deliver (after its retries), by type",
        labels=[*labels, "type"],
    )
    dropped = CounterMetricFamily(
        "streamcap_sink_finals_dropped",
        "Finals a sink never got: its queue was full, or the server closed",
        labels=[*labels, "reason"],
    )
    coalesced = CounterMetricFamily(
        "streamcap_sink_partials_coalesced",
        "Partials replaced by a newer one before a sink took them",
        labels=labels,
    )
    waiting = GaugeMetricFamily(
        "streamcap_sink_waiting", "Captions waiting in a sink's queue", labels=labels
    )
    busy = GaugeMetricFamily(
        "streamcap_sink_busy_seconds",
        "How long the delivery under way has taken so far (0: none)",
        labels=labels,
    )
    for f in sinks:
        at = [f.kind, f.stream]
        sent.add_metric([*at, "final"], f.delivered_finals)
        sent.add_metric([*at, "partial"], f.delivered_partials)
        failed.add_metric([*at, "final"], f.failed_finals)
        failed.add_metric([*at, "partial"], f.failed_partials)
        dropped.add_metric([*at, "queue_full"], f.dropped_queue_full)
        dropped.add_metric([*at, "shutdown"], f.dropped_shutdown)
        coalesced.add_metric(at, f.coalesced_partials)
        waiting.add_metric(at, f.waiting)
        busy.add_metric(at, f.busy_s)
    yield from (sent, failed, dropped, coalesced, waiting, busy)


def remote_families(r: RemoteStatus) -> Iterator[Metric]:
    """The Ray backend (`cluster.remote.RemoteWorker.remote_status`): the cluster, the
    gateway's retries and losses, and one series per replica (replicas are few and come and
    go: the gateway keeps the latest 64)."""
    yield GaugeMetricFamily(
        "streamcap_cluster_connected", "1 while the Ray cluster answers", value=float(r.connected)
    )
    yield GaugeMetricFamily(
        "streamcap_replicas_running", "Inference replicas running", value=r.running
    )
    yield GaugeMetricFamily(
        "streamcap_replicas_target", "Inference replicas asked for", value=r.target
    )
    yield GaugeMetricFamily(
        "streamcap_fallback_active",
        "1 while decodes go to the local fallback",
        value=float(r.fallback_active),
    )
    inflight = GaugeMetricFamily(
        "streamcap_remote_inflight", "Requests sent and not yet answered", labels=["kind"]
    )
    retries = CounterMetricFamily(
        "streamcap_remote_retries", "Lost finals resent to another replica", labels=["kind"]
    )
    inflight.add_metric(["final"], r.inflight_finals)
    inflight.add_metric(["partial"], r.inflight_partials)
    retries.add_metric(["final"], r.finals_resent)
    retries.add_metric(["partial"], r.partials_lost)
    yield inflight
    yield retries
    lost = CounterMetricFamily(
        "streamcap_remote_lost", "Requests that got no reply, by reason", labels=["reason"]
    )
    for reason, n in sorted(r.lost.items()):
        lost.add_metric([reason], n)
    yield lost
    for name, doc, value in (
        ("streamcap_remote_duplicates_ignored", "Second replies to one request", r.duplicates),
        ("streamcap_fallback_decodes", "Decodes sent to the local fallback", r.fallback_jobs),
        ("streamcap_remote_final_timeouts", "Finals given up undecoded", r.deadline_errors),
    ):
        yield CounterMetricFamily(name, doc, value=value)
    yield GaugeMetricFamily(
        "streamcap_remote_transport_p95_seconds",
        "Round trip minus the replica's own time, 95th percentile of the latest requests",
        value=r.transport_p95_s,
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
    for rep in r.replicas:
        rid = rep.replica
        place = {"pid": str(rep.pid), "node": rep.node, "device": rep.device}
        info.add_metric([rid], {**place, "precision": rep.precision})
        alive.add_metric([rid], float(rep.alive))
        busy.add_metric([rid, "final"], rep.inflight_finals)
        busy.add_metric([rid, "partial"], rep.inflight_partials)
        jobs.add_metric([rid, "final"], rep.finals)
        jobs.add_metric([rid, "partial"], rep.partials)
        compute.add_metric([rid], rep.compute_s)
    yield from (info, alive, busy, jobs, compute)


class ServerMetrics:
    """The server's metrics, in a registry of their own."""

    def __init__(
        self,
        hub: HubSource | None = None,
        worker: WorkerSource | None = None,
        info: Mapping[str, str] | None = None,
        remote: RemoteSource | None = None,
        sinks: SinkSource | None = None,
    ) -> None:
        """``hub``, ``worker``, ``remote`` and ``sinks`` are read at each scrape (one typed
        snapshot each); a source not given publishes nothing (the counters below are always
        there)."""
        self.registry = CollectorRegistry(auto_describe=True)
        self.registry.register(_LiveCollector(hub, worker, info or {}, remote, sinks))
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
        self.pace_changes = Counter(
            "streamcap_partial_pace_changes",
            "Streams whose partials changed pace, by the new pace: thinned or paused when the "
            "worker fell behind, live when it caught up (core.load_shed)",
            ["pace"],
            registry=r,
        )
        for pace in ("live", "thinned", "paused"):
            self.pace_changes.labels(pace)
        self.finals_dropped = Counter(
            "streamcap_finals_dropped",
            "Voiced finals that ended with no text, by reason (hallucination guard, no decode)",
            ["reason"],
            registry=r,
        )
        for reason in (*DROP_REASONS, NOT_DECODED):  # every reason listed, zero until it happens
            self.finals_dropped.labels(reason)
        for reason in CLOSE_REASONS:
            self.closed.labels(reason)
        for kind in ("partial", "final"):
            self.captions.labels(kind)
        for route in ("ingest", "captions"):
            self.connections.labels(route)

    def pace_changed(self, pace: str) -> None:
        """A stream's partials changed pace (`core.load_shed`: it fell behind, or caught up)."""
        self.pace_changes.labels(pace).inc()

    def final_dropped(self, dropped: DroppedFinal) -> None:
        """A live stream's voiced final ended with no text (`LiveStream.on_drop`; any thread)."""
        self.finals_dropped.labels(dropped.reason).inc()

    def refuse(self, reason: str) -> None:
        self.closed.labels(reason if reason in CLOSE_REASONS else "internal").inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
