"""An inference replica: a Ray Serve deployment around the engine and the (batched) worker.

Each replica loads the model once, warms it up, and runs its own `InferenceWorker`, whose
scheduler and batching work across the few requests Serve lets in at once
(``max_ongoing_requests``). A request is self-contained (`cluster.wire`), so the replica keeps
no stream state: losing it loses only what it was decoding, which the gateway resends.

Started by `cluster.bridge` (``streamcap serve --backend ray --replicas N``), by
``streamcap replicas``, or by Serve's own tooling from `build_app`:
``serve run streamcap.cluster.replica:build_app model=base threads=1``. The engine is made by
name (`runtime.engines`: ``engine=``, default transformers), so it must be one registered when
streamcap is imported.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any, cast

from ray import serve

from streamcap.cluster.wire import (
    ClusterSpec,
    ReplicaInfo,
    ReplicaReply,
    ReplicaRequest,
    ReplicaSpec,
    job_of,
    model_fingerprint,
    reply_of,
)
from streamcap.runtime.engines import DEFAULT_ENGINE, EngineOptions, make_engine
from streamcap.runtime.jobs import DecodeJob, JobOutcome

#: the deployment's name inside its Serve application
DEPLOYMENT = "WhisperReplica"


@serve.deployment(name=DEPLOYMENT, health_check_period_s=5, graceful_shutdown_timeout_s=30)
class WhisperReplica:
    """One model, one worker thread; `decode` is what the gateway calls."""

    def __init__(self, spec: ReplicaSpec) -> None:
        import ray

        from streamcap.models.registry import resolve
        from streamcap.runtime.worker import InferenceWorker

        device = "cuda" if spec.gpus > 0 and spec.device == "auto" else spec.device
        options = EngineOptions(spec.model, spec.assistant, device, spec.threads, spec.precision)
        self.engine = make_engine(spec.engine, options)
        self.worker = InferenceWorker(self.engine, name="replica-worker", max_batch=spec.max_batch)
        cost = self.worker.warm_up(spec.language)
        self.worker.start()
        context = serve.get_replica_context()
        self.info = ReplicaInfo(
            replica=context.replica_id.unique_id,
            pid=os.getpid(),
            node=str(ray.util.get_node_ip_address()),
            model=spec.model,
            # the checkpoint the gateway's card hashes too (`ModelCard.path`: the same rule)
            fingerprint=model_fingerprint(resolve(spec.model)),
            device=str(self.engine.placement.device),
            precision=str(self.engine.precision),
            final_cost_s=cost,
        )

    async def decode(self, request: ReplicaRequest) -> ReplicaReply:
        """Decode ``request`` on this replica's worker (its scheduler, its batches)."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[JobOutcome] = loop.create_future()

        def settle(outcome: JobOutcome) -> None:
            if not done.done():
                done.set_result(outcome)

        def on_done(job: DecodeJob, outcome: JobOutcome) -> None:  # the worker's thread
            loop.call_soon_threadsafe(settle, outcome)

        self.worker.submit(job_of(request, on_done))
        outcome = await done
        return reply_of(request, outcome, self.info, self.worker.queue_depth)

    def describe(self) -> ReplicaInfo:
        """Who this replica is (the gateway checks model and protocol when it attaches)."""
        return self.info

    def check_health(self) -> None:
        """Serve restarts a replica whose inference thread is gone."""
        if not self.worker.threaded:
            raise RuntimeError("the inference thread is gone")

    def __del__(self) -> None:
        worker = getattr(self, "worker", None)
        if worker is not None:
            worker.stop(timeout=10)


def deployment(spec: ClusterSpec) -> Any:
    """The bound application for ``spec``: placement, bounds, scaling, routing."""
    options: dict[str, Any] = {
        "max_ongoing_requests": spec.inflight,
        "ray_actor_options": {"num_cpus": spec.replica.threads, "num_gpus": spec.replica.gpus},
    }
    scaling = spec.autoscaling()
    if scaling is not None:
        options["autoscaling_config"] = scaling
    else:
        options["num_replicas"] = spec.replicas or 1
    if spec.affinity:
        from ray.serve.config import RequestRouterConfig

        options["request_router_config"] = RequestRouterConfig(
            request_router_class="streamcap.cluster.router:StreamAffinityRouter"
        )
    return cast(Any, WhisperReplica).options(**options).bind(spec.replica)


def build_app(args: dict[str, str]) -> Any:
    """For Serve's own tooling (``serve run`` / ``serve deploy``). Keys: ``model``,
    ``engine``, ``assistant``, ``device``, ``precision``, ``threads``, ``gpus``, ``max_batch``, and
    ``replicas`` or ``min_replicas`` + ``max_replicas``, ``inflight``, ``affinity`` (on/off)."""

    def number(key: str) -> int | None:
        return int(args[key]) if key in args else None

    replica = ReplicaSpec(
        model=args.get("model", "base"),
        engine=args.get("engine", DEFAULT_ENGINE),
        assistant=args.get("assistant") or None,
        device=args.get("device", "auto"),
        precision=args.get("precision", "auto"),
        threads=number("threads") or 1,
        gpus=float(args.get("gpus", 0)),
        max_batch=number("max_batch") or 8,
    )
    autoscale = "max_replicas" in args
    spec = ClusterSpec(
        replica=replica,
        replicas=None if autoscale else number("replicas") or 1,
        min_replicas=number("min_replicas"),
        max_replicas=number("max_replicas"),
        inflight=number("inflight") or 2,
        affinity=args.get("affinity", "on") != "off",
    )
    return deployment(spec)
