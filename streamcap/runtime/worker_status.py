"""What a worker reports of itself beyond its books: frozen figures, read field by field.

The server's status and metrics (`server.metrics`) read a worker through
`runtime.worker_api.WorkerStatus`; what it returns is typed here, next to the books' own
snapshots (`runtime.jobs.StreamStats`, `WorkerStats`), so that no consumer parses a dict back
by key. The cost model fills `BatchFigures` (`runtime.costs.CostModel.batch_figures`); the
Ray gateway fills `RemoteStatus` (`cluster.books.RemoteBooks.status`). Pure data: nothing
here imports a model, a thread or a backend (the server may import it, the cluster may not be
imported by the server).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["BatchFigures", "RemoteStatus", "ReplicaStatus"]


@dataclass(frozen=True)
class BatchFigures:
    """The decoder batches a worker ran (`runtime.costs`): how many of each size, and the
    measured mean seconds of one lockstep decoder step at each size."""

    #: batches run, by size (rows decoded together)
    batches: Mapping[int, int] = field(default_factory=dict)
    #: mean seconds of one decoder step, by batch size (measured sizes only)
    step_s: Mapping[int, float] = field(default_factory=dict)

    @property
    def mean_size(self) -> float | None:
        """Mean rows per batch over every batch run; None before the first."""
        total = sum(self.batches.values())
        if not total:
            return None
        return sum(b * n for b, n in self.batches.items()) / total


@dataclass(frozen=True)
class ReplicaStatus:
    """One inference replica as the gateway sees it (its identity, what it did, what it holds
    now)."""

    replica: str
    pid: int
    node: str
    device: str
    precision: str
    alive: bool
    finals: int  # decodes it answered, by kind
    partials: int
    compute_s: float  # its own decode time, summed
    lost: int  # times it died with requests on it (reports; not on /metrics)
    inflight_finals: int  # requests on it now, by kind
    inflight_partials: int


@dataclass(frozen=True)
class RemoteStatus:
    """A backend whose decoders live elsewhere (`cluster.remote.RemoteWorker`): the cluster,
    the gateway's requests in flight, resent, lost and ignored, and each replica (the latest
    64: replicas come and go)."""

    connected: bool
    running: int  # replicas usable now (0 while not connected)
    target: int  # replicas asked for
    fallback_active: bool  # new work goes to the local fallback
    inflight_finals: int  # requests sent and not yet answered, by kind
    inflight_partials: int
    finals_resent: int  # finals lost with a replica and sent again
    partials_lost: int  # partials lost with a replica (dropped, never resent)
    #: requests that got no reply, by reason (`cluster.remote.LOST_REASONS`; only those seen)
    lost: Mapping[str, int]
    duplicates: int  # second replies to one request, ignored
    fallback_jobs: int  # decodes sent to the local fallback
    deadline_errors: int  # finals given up undecoded
    #: round trip minus the replica's own time, latest requests (/metrics: the p95 only)
    transport_p50_s: float
    transport_p95_s: float
    replicas: tuple[ReplicaStatus, ...] = ()
