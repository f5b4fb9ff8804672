"""Serve request router: a stream's requests go to the replica that served it last.

It runs in the bridge (the process holding the deployment handle), one per gateway. The
stream's last replica is tried first while it has room; otherwise two others, the less loaded
first (Serve's power of two choices), so affinity never queues a request behind a busy
replica. A new stream goes to the replica holding the fewest streams, so sticky streams spread
over the replicas instead of piling onto whichever was idle first (measured: with plain
power of two choices, two streams both stuck to one of two replicas). Dead replicas are not
among Serve's candidates, so a stream moves on by itself.

It also tells the bridge where each request went (`ON_ROUTED`), which is how the gateway
knows every replica's in-flight work, and which replica's death loses which requests.
"""

from __future__ import annotations

import importlib
import random
import time
from collections import Counter, OrderedDict
from collections.abc import Callable
from typing import Any

from ray.serve.request_router import PendingRequest, ReplicaID, RequestRouter, RunningReplica

#: the bridge's callback: (request key, replica id), called on Serve's router loop
ON_ROUTED: Callable[[str, str], None] | None = None

MAX_STREAMS = 10_000
#: a stream that sent nothing for this long no longer counts toward its replica's streams
ACTIVE_S = 30.0


class StreamAffinityRouter(RequestRouter):
    def initialize_state(self, **kwargs: Any) -> None:
        #: stream -> (its last replica, when it last sent), least recently active first
        self._last: OrderedDict[str, tuple[ReplicaID, float]] = OrderedDict()

    def _active_streams(self) -> Counter[ReplicaID]:
        """Streams per replica among those that sent within `ACTIVE_S` (ended streams stop
        counting by themselves: the router never hears that a stream ended)."""
        since = time.monotonic() - ACTIVE_S
        return Counter(r for r, t in self._last.values() if t >= since)

    async def choose_replicas(
        self,
        candidate_replicas: list[RunningReplica],
        pending_request: PendingRequest | None = None,
    ) -> list[list[RunningReplica]]:
        stream = pending_request.metadata.session_id if pending_request else ""
        last = self._last.get(stream) if stream else None
        mine = [r for r in candidate_replicas if last is not None and r.replica_id == last[0]]
        if not mine and candidate_replicas:  # a new stream (or its replica died)
            load = self._active_streams()
            fewest = min(load[r.replica_id] for r in candidate_replicas)
            mine = [random.choice([r for r in candidate_replicas if load[r.replica_id] == fewest])]
        rest = [r for r in candidate_replicas if r not in mine]
        ranks = [mine] if mine else []
        if rest:
            ranks.append(random.sample(rest, min(2, len(rest))))
        return ranks

    def on_request_routed(
        self, pending_request: PendingRequest, replica_id: ReplicaID, result: Any
    ) -> None:
        stream = pending_request.metadata.session_id
        if stream:
            self._last[stream] = (replica_id, time.monotonic())
            self._last.move_to_end(stream)
            while len(self._last) > MAX_STREAMS:
                self._last.popitem(last=False)
        key = getattr(pending_request.args[0], "key", None) if pending_request.args else None
        # Serve ships the router class by value (cloudpickle): its globals are a copy taken at
        # deploy time, so the bridge's hook is read from the module itself
        hook = getattr(importlib.import_module("streamcap.cluster.router"), "ON_ROUTED", None)
        if key and hook is not None:
            hook(key, replica_id.unique_id)
