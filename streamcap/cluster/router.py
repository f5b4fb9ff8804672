"""Serve request router: a stream's requests go to the replica that served it last.

It runs in the bridge (the process holding the deployment handle), one per gateway. The
stream's last replica is tried first while it has room; otherwise two others, the less loaded
first (Serve's power of two choices), so affinity never queues a request behind a busy
replica. Dead replicas are not among Serve's candidates, so a stream moves on by itself.

It also tells the bridge where each request went (`ON_ROUTED`), which is how the gateway
knows every replica's in-flight work, and which replica's death loses which requests.
"""

from __future__ import annotations

import importlib
import random
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from ray.serve.request_router import PendingRequest, ReplicaID, RequestRouter, RunningReplica

#: the bridge's callback: (request key, replica id), called on Serve's router loop
ON_ROUTED: Callable[[str, str], None] | None = None

MAX_STREAMS = 10_000


class StreamAffinityRouter(RequestRouter):
    def initialize_state(self, **kwargs: Any) -> None:
        self._last: OrderedDict[str, ReplicaID] = OrderedDict()

    async def choose_replicas(
        self,
        candidate_replicas: list[RunningReplica],
        pending_request: PendingRequest | None = None,
    ) -> list[list[RunningReplica]]:
        stream = pending_request.metadata.session_id if pending_request else ""
        last = self._last.get(stream) if stream else None
        mine = [r for r in candidate_replicas if r.replica_id == last]
        rest = [r for r in candidate_replicas if r.replica_id != last]
        ranks = [mine] if mine else []
        if rest:
            ranks.append(random.sample(rest, min(2, len(rest))))
        return ranks

    def on_request_routed(
        self, pending_request: PendingRequest, replica_id: ReplicaID, result: Any
    ) -> None:
        stream = pending_request.metadata.session_id
        if stream:
            self._last[stream] = replica_id
            self._last.move_to_end(stream)
            while len(self._last) > MAX_STREAMS:
                self._last.popitem(last=False)
        key = getattr(pending_request.args[0], "key", None) if pending_request.args else None
        # Serve ships the router class by value (cloudpickle): its globals are a copy taken at
        # deploy time, so the bridge's hook is read from the module itself
        hook = getattr(importlib.import_module("streamcap.cluster.router"), "ON_ROUTED", None)
        if key and hook is not None:
            hook(key, replica_id.unique_id)
