"""The Ray backend's flags (`ClusterOptions`) and the gateway's remote worker (`streamcap serve
--backend ray`, `streamcap replicas`; docs/scaling.md).

Everything here is checked before any model loads or any process starts: Ray not installed,
flags that contradict each other, a cluster address nobody answers at: one line each.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import socket
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from streamcap.cli.common import UsageError, say
from streamcap.cli.numbers import Number, positive_float, positive_int
from streamcap.cli.parser import flag_default
from streamcap.cluster.wire import ClusterSpec, ReplicaSpec
from streamcap.errors import UserError

if TYPE_CHECKING:
    from streamcap.cli.model_options import ModelOptions, TaskOptions
    from streamcap.cluster.remote import RemoteWorker
    from streamcap.core.capacity import CapacityConfig

#: --backend: where decodes run.
LOCAL, RAY = "local", "ray"
#: --fallback: with no replica usable, let finals wait, or decode in this process.
NO_FALLBACK, LOCAL_FALLBACK = "none", "local"
#: Requests in flight per replica with GPUs when --replica-inflight is not given (on a CPU:
#: `ClusterSpec.inflight`).
GPU_INFLIGHT = 8
#: flags that mean something only with --backend ray
RAY_FLAGS = ("ray_address", "replicas", "min_replicas", "max_replicas", "replica_threads",
             "replica_gpus", "replica_inflight", "fallback", "app", "affinity")  # fmt: skip


@dataclass(frozen=True)
class ClusterOptions:
    """Where decodes run (--backend), the fallback, and the replicas' flags as a `ClusterSpec`
    whose replicas load the command's own model (`spec_for`); built once by `from_args`,
    which refuses flags that contradict each other."""

    backend: str = LOCAL
    fallback: str = NO_FALLBACK
    spec: ClusterSpec = field(default_factory=ClusterSpec)

    @property
    def uses_ray(self) -> bool:
        return self.backend == RAY

    def spec_for(self, model: ModelOptions, task: TaskOptions) -> ClusterSpec:
        """The cluster's spec with its replicas loading `model` (warmed up in `task`'s
        language)."""
        replica = replace(
            self.spec.replica,
            model=model.model,
            engine=model.engine,
            assistant=model.assistant,
            device=model.device,
            precision=model.precision,
            language=task.decode_language,
        )
        return replace(self.spec, replica=replica)

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> ClusterOptions:
        """The flags of `add_cluster_flags`. Without Ray, a Ray flag set (on the command line
        or in the config file: anything but its built-in default) is a UsageError."""
        if args.backend != RAY:
            flags = vars(args)
            given = [dest for dest in RAY_FLAGS if flags[dest] != flag_default(args, dest)]
            if given:
                raise UsageError(f"--{given[0].replace('_', '-')} needs --backend ray")
        low, high = args.min_replicas, args.max_replicas
        if low is not None and high is None:
            raise UsageError("--min-replicas needs --max-replicas")
        if high is not None and low is None:
            low = 1
        if high is not None and low is not None and high < low:
            raise UsageError("--max-replicas must be at least --min-replicas")
        if args.replica_gpus < 0:
            raise UsageError("--replica-gpus cannot be negative")
        gpus = float(args.replica_gpus or 0)
        d = ClusterSpec()
        spec = ClusterSpec(
            address=args.ray_address or os.environ.get("RAY_ADDRESS") or d.address,
            app=args.app,
            replica=ReplicaSpec(threads=args.replica_threads, gpus=gpus),
            replicas=args.replicas,
            min_replicas=low,
            max_replicas=high,
            inflight=args.replica_inflight or (GPU_INFLIGHT if gpus > 0 else d.inflight),
            affinity=args.affinity == "on",
            start_timeout_s=args.replica_start_timeout,
        )
        return cls(backend=args.backend, fallback=args.fallback, spec=spec)


def add_cluster_flags(p: argparse.ArgumentParser, *, backend: bool) -> None:
    """The replicas' flags; with ``backend`` also --backend and --fallback (serve). Without
    (`replicas`): the backend is Ray, with no fallback (that is a gateway's)."""
    d, r = ClusterSpec(), ReplicaSpec()
    g = p.add_argument_group("inference replicas (Ray Serve; docs/scaling.md)")
    if backend:
        g.add_argument(
            "--backend", choices=[LOCAL, RAY], default=ClusterOptions.backend,
            help="where decodes run: this process, or Ray Serve replicas (pip install "
            "'streamcap[ray]')",
        )  # fmt: skip
    else:
        p.set_defaults(backend=RAY, fallback=NO_FALLBACK)
    g.add_argument(
        "--ray-address", metavar="auto|HOST:PORT", default=None,
        help=f"the Ray cluster: {d.address} = the one this machine is a node of (default: "
        f"$RAY_ADDRESS, else {d.address})",
    )  # fmt: skip
    n = g.add_mutually_exclusive_group()
    n.add_argument(
        "--replicas", type=positive_int, metavar="N",
        help="run N replicas (default: use the replicas already running)",
    )  # fmt: skip
    n.add_argument(
        "--min-replicas", type=positive_int, metavar="A",
        help="autoscale between A and --max-replicas on queue depth (default: a fixed number)",
    )  # fmt: skip
    g.add_argument(
        "--max-replicas", type=positive_int, metavar="B",
        help="see --min-replicas (default: none)",
    )  # fmt: skip
    g.add_argument(
        "--replica-threads", type=positive_int, default=r.threads, metavar="T",
        help="CPU threads (and Ray CPUs) per replica",
    )  # fmt: skip
    g.add_argument(
        "--replica-gpus", type=Number(float, low=0), default=r.gpus, metavar="G",
        help="GPUs per replica (may be a fraction; > 0 decodes on CUDA there)",
    )  # fmt: skip
    g.add_argument(
        "--replica-inflight", type=positive_int, default=None, metavar="K",
        help=f"requests in flight per replica (default: {d.inflight} on CPU, {GPU_INFLIGHT} "
        "with GPUs)",
    )  # fmt: skip
    g.add_argument(
        "--app", default=d.app, metavar="NAME",
        help="the replicas' Serve application (several gateways may share one)",
    )  # fmt: skip
    g.add_argument(
        "--affinity", choices=["on", "off"], default="on" if d.affinity else "off",
        help="send a stream's decodes to the replica that served it last while it has room",
    )  # fmt: skip
    if backend:
        g.add_argument(
            "--fallback", choices=[NO_FALLBACK, LOCAL_FALLBACK], default=ClusterOptions.fallback,
            help="with no replica usable for 5 s: let finals wait (bounded), or decode here "
            "(local loads the model in this process too)",
        )  # fmt: skip
    g.add_argument(
        "--replica-start-timeout", type=positive_float, default=d.start_timeout_s, metavar="S",
        help="wait this long for the first replica to run",
    )  # fmt: skip


def check_ray(cluster: ClusterOptions) -> None:
    """With --backend ray: Ray Serve installed, and something answering at the cluster's
    address (unless auto): one line each, before anything loads."""
    if not cluster.uses_ray:
        return
    if importlib.util.find_spec("ray") is None:
        raise UserError(
            "--backend ray needs Ray Serve, which is not installed: pip install 'streamcap[ray]'"
        )
    address = cluster.spec.address
    if address != "auto":
        probe(address)


def probe(address: str, timeout: float = 3.0) -> None:
    """One line when nothing listens at the cluster's GCS address."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise UsageError(f"--ray-address {address!r}: expected auto or HOST:PORT")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            pass
    except OSError as e:
        why = getattr(e, "strerror", None) or str(e) or type(e).__name__
        raise UserError(
            f"cannot reach the Ray cluster at {address} ({why}): start one with "
            f"'ray start --head --port {port}', or pass the right --ray-address"
        ) from None


def start_remote_worker(
    cluster: ClusterOptions, model: ModelOptions, task: TaskOptions, capacity: CapacityConfig
) -> RemoteWorker:
    """The gateway's `RemoteWorker`: the model's card, the bridge, the fallback if asked;
    connected, the first replica running, the dispatcher started."""
    from streamcap.cli.model_options import load_engine
    from streamcap.cluster.remote import RemoteWorker
    from streamcap.cluster.remote_config import RemoteConfig
    from streamcap.cluster.transport import BridgeTransport, LocalTransport
    from streamcap.cluster.wire import model_fingerprint
    from streamcap.models.card import ModelCard
    from streamcap.runtime.worker import InferenceWorker

    spec = cluster.spec_for(model, task)
    card = ModelCard.load(spec.replica.model)
    fallback = None
    if cluster.fallback == LOCAL_FALLBACK:
        local = InferenceWorker(load_engine(model, task), capacity=capacity)
        local.warm_up(task.decode_language)
        fallback = LocalTransport(local)
    what = f"{spec.replicas} replicas" if spec.replicas else (
        f"{spec.min_replicas}-{spec.max_replicas} replicas" if spec.max_replicas
        else "the running replicas"
    )  # fmt: skip
    say(f"connecting to the Ray cluster ({spec.address}): {what} of {spec.replica.model} ...")
    worker = RemoteWorker(
        card,
        BridgeTransport(spec, fingerprint=model_fingerprint(card.path)),
        config=RemoteConfig(replica_inflight=spec.inflight, start_timeout_s=spec.start_timeout_s),
        capacity=capacity,
        fallback=fallback,
    )
    worker.connect()
    worker.warm_up(task.decode_language)
    worker.start()
    say(f"ray: {worker.health()}")
    return worker
