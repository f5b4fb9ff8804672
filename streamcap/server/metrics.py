"""Prometheus metrics of one caption server (its own registry, so several servers can coexist).

Counters and histograms that the server updates as things happen live here; values owned by
others (connected streams and viewers, the inference worker's queue and token counts) are read
at scrape time by a collector, so nothing has to be kept in sync. No per-stream labels: stream
ids come from clients, and a label per id would grow without bound.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

#: Content type of the text exposition format.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

#: Final latency buckets (seconds): the target is p95 < 2 s.
LATENCY_BUCKETS = (0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 30.0)

#: Reasons a connection is refused or closed by the server (a fixed set: bounded labels).
CLOSE_REASONS = (
    "auth", "origin", "bad_path", "bad_data", "too_big", "flood", "idle", "limit", "busy",
    "slow_viewer", "unknown_stream", "internal", "host", "start_timeout", "connections",
    "shutdown",
)  # fmt: skip

Snapshot = Callable[[], Mapping[str, float]]


def _num(stats: Any, *names: str) -> float | None:
    """First of ``names`` found on ``stats`` (attribute or mapping key) as a float."""
    for name in names:
        value = stats.get(name) if isinstance(stats, Mapping) else getattr(stats, name, None)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    return None


def worker_snapshot(worker: Any) -> dict[str, float]:
    """Totals of an inference worker, read defensively (missing fields are skipped)."""
    out: dict[str, float] = {}
    stats = None
    for attr in ("total_stats", "stats"):
        value = getattr(worker, attr, None)
        stats = value() if callable(value) else value
        if stats is not None:
            break
    depth = getattr(worker, "queue_depth", None)
    depth = depth() if callable(depth) else depth
    if isinstance(depth, (int, float)):
        out["queue_depth"] = float(depth)
    if stats is None:
        return out
    for key, names in (
        ("queue_depth", ("queue_depth", "pending")),
        ("decode_seconds", ("decode_s", "decode_seconds", "compute_s")),
        ("encoder_seconds", ("encoder_s", "encoder_seconds")),
        ("decoder_seconds", ("decoder_s", "decoder_seconds")),
        ("drafted_tokens", ("drafted", "drafted_tokens")),
        ("accepted_tokens", ("accepted", "accepted_tokens")),
        ("forward_passes", ("forward_passes", "main_forward_passes", "forwards")),
        ("jobs", ("jobs", "decodes", "jobs_done")),
        ("partials_dropped", ("dropped_partials", "partials_dropped", "stale_dropped")),
    ):
        if key in out:
            continue
        value = _num(stats, *names)
        if value is not None:
            out[key] = value
    if "decode_seconds" not in out and {"encoder_seconds", "decoder_seconds"} <= out.keys():
        out["decode_seconds"] = out["encoder_seconds"] + out["decoder_seconds"]
    return out


class _LiveCollector(Collector):
    """Gauges and worker counters computed when Prometheus scrapes."""

    def __init__(self, hub: Snapshot, worker: Snapshot) -> None:
        self._hub = hub
        self._worker = worker

    def collect(self) -> Iterator[Metric]:
        hub = self._hub()
        yield GaugeMetricFamily(
            "streamcap_streams", "Streams with a publisher connected", value=hub.get("streams", 0)
        )
        yield GaugeMetricFamily(
            "streamcap_streams_retained",
            "Streams kept in memory for replay and SRT/VTT (live and ended)",
            value=hub.get("retained", 0),
        )
        yield GaugeMetricFamily(
            "streamcap_viewers", "Caption viewers connected", value=hub.get("viewers", 0)
        )
        w = self._worker()
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


class ServerMetrics:
    """The server's metrics, in a registry of their own."""

    def __init__(self, hub: Snapshot, worker: Snapshot) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.registry.register(_LiveCollector(hub, worker))
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
