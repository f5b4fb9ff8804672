"""The gateway's books on the Ray backend: each replica's work, and what was lost or resent.

Kept apart from the scheduler (`cluster.remote`), which calls every method with its lock held;
nothing here waits. `status` is what /metrics publishes (`runtime.worker_status.RemoteStatus`,
read by `server.metrics.remote_families`).
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from streamcap.runtime.worker_status import RemoteStatus, ReplicaStatus

from .wire import ReplicaInfo, ReplicaReply

#: replicas remembered (they come and go: the dead ones are forgotten first)
MAX_REPLICAS = 64


@dataclass
class ReplicaBooks:
    """What one replica did for this gateway."""

    info: ReplicaInfo
    alive: bool = True
    jobs: Counter[str] = field(default_factory=Counter)
    compute_s: float = 0.0
    lost: int = 0


class RemoteBooks:
    """Per-replica books and the backend's counters (see the module docstring)."""

    def __init__(self) -> None:
        self.replicas: dict[str, ReplicaBooks] = {}
        self.finals_resent = 0  # finals lost with a replica and sent again
        self.partials_lost = 0  # partials lost with a replica (dropped, never resent)
        self.lost: Counter[str] = Counter()  # requests without a reply, by reason
        self.duplicates = 0  # second replies to one request, ignored
        self.fallback_jobs = 0
        self.deadline_errors = 0  # finals given up undecoded
        self._transport_s: deque[float] = deque(maxlen=512)  # round trip - replica's own time

    def replica(self, info: ReplicaInfo) -> ReplicaBooks:
        """``info``'s books (made on first sight), marked alive."""
        r = self.replicas.get(info.replica)
        if r is None:
            r = self.replicas[info.replica] = ReplicaBooks(info)
            while len(self.replicas) > MAX_REPLICAS:
                dead = [k for k, v in self.replicas.items() if not v.alive]
                self.replicas.pop(dead[0] if dead else next(iter(self.replicas)))
        r.info = info
        r.alive = True
        return r

    def replied(self, kind: str, reply: ReplicaReply, round_trip: float) -> None:
        replica = self.replica(reply.replica)
        if reply.result is not None:
            replica.jobs[kind] += 1
            replica.compute_s += reply.compute_s
        self._transport_s.append(max(0.0, round_trip - reply.compute_s - reply.queued_s))

    def died(self, replica: str | None) -> None:
        r = self.replicas.get(replica or "")
        if r is not None:
            r.alive = False
            r.lost += 1

    def running(self, ids: frozenset[str] | None) -> None:
        """Serve's list of live replicas (None: not known)."""
        if ids is not None:
            for rid, r in self.replicas.items():
                r.alive = rid in ids

    def status(
        self,
        inflight: Iterable[tuple[str, str | None]],
        *,
        connected: bool,
        running: int,
        target: int,
        fallback_active: bool,
    ) -> RemoteStatus:
        """What /metrics publishes: these counters and per-replica figures with the cluster's
        state the gateway gives; ``inflight``: (kind, replica) of each request."""
        pending = list(inflight)
        on = Counter(pending)
        kinds = Counter(kind for kind, _ in pending)
        transport = sorted(self._transport_s)
        replicas = tuple(
            ReplicaStatus(
                replica=rid,
                pid=r.info.pid,
                node=r.info.node,
                device=r.info.device,
                precision=r.info.precision,
                alive=r.alive,
                finals=r.jobs["final"],
                partials=r.jobs["partial"],
                compute_s=r.compute_s,
                lost=r.lost,
                inflight_finals=on[("final", rid)],
                inflight_partials=on[("partial", rid)],
            )
            for rid, r in self.replicas.items()
        )
        return RemoteStatus(
            connected=connected,
            running=running,
            target=target,
            fallback_active=fallback_active,
            inflight_finals=kinds["final"],
            inflight_partials=kinds["partial"],
            finals_resent=self.finals_resent,
            partials_lost=self.partials_lost,
            lost=dict(self.lost),
            duplicates=self.duplicates,
            fallback_jobs=self.fallback_jobs,
            deadline_errors=self.deadline_errors,
            transport_p50_s=_quantile(transport, 0.5),
            transport_p95_s=_quantile(transport, 0.95),
            replicas=replicas,
        )

    def final_cost(self) -> float | None:
        """The cheapest replica's warm-up estimate of one final (admission's prior)."""
        costs = [r.info.final_cost_s for r in self.replicas.values() if r.info.final_cost_s]
        return min(costs) if costs else None


def _quantile(xs: list[float], q: float) -> float:
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else 0.0
