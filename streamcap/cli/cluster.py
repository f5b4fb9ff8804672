"""The Ray backend's flags and the gateway's remote worker (`streamcap serve --backend ray`,
`streamcap replicas`; docs/scaling.md).

Everything here is checked before any model loads or any process starts: Ray not installed,
flags that contradict each other, a cluster address nobody answers at: one line each.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import socket
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from streamcap.cli.common import UsageError, positive_float, positive_int, say
from streamcap.errors import UserError

if TYPE_CHECKING:
    from streamcap.cluster.remote import RemoteWorker

#: flags that mean something only with --backend ray
RAY_FLAGS = ("ray_address", "replicas", "min_replicas", "max_replicas", "replica_threads",
             "replica_gpus", "replica_inflight", "fallback", "app", "affinity")  # fmt: skip


def add_cluster_flags(p: argparse.ArgumentParser, *, backend: bool) -> None:
    """The replicas' flags; with ``backend`` also --backend and --fallback (serve)."""
    g = p.add_argument_group("inference replicas (Ray Serve; docs/scaling.md)")
    if backend:
        g.add_argument(
            "--backend", choices=["local", "ray"], default="local",
            help="where decodes run: this process, or Ray Serve replicas (pip install "
            "'streamcap[ray]')",
        )  # fmt: skip
    g.add_argument(
        "--ray-address", metavar="auto|HOST:PORT", default=None,
        help="the Ray cluster: auto = the one this machine is a node of (default: $RAY_ADDRESS, "
        "else auto)",
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
        "--replica-threads", type=positive_int, default=1, metavar="T",
        help="CPU threads (and Ray CPUs) per replica",
    )  # fmt: skip
    g.add_argument(
        "--replica-gpus", type=float, default=0.0, metavar="G",
        help="GPUs per replica (may be a fraction; > 0 decodes on CUDA there)",
    )  # fmt: skip
    g.add_argument(
        "--replica-inflight", type=positive_int, default=None, metavar="K",
        help="requests in flight per replica (default: 2 on CPU, 8 with GPUs)",
    )  # fmt: skip
    g.add_argument(
        "--app", default="streamcap", metavar="NAME",
        help="the replicas' Serve application (several gateways may share one)",
    )  # fmt: skip
    g.add_argument(
        "--affinity", choices=["on", "off"], default="on",
        help="send a stream's decodes to the replica that served it last while it has room",
    )  # fmt: skip
    if backend:
        g.add_argument(
            "--fallback", choices=["none", "local"], default="none",
            help="with no replica usable for 5 s: let finals wait (bounded), or decode here "
            "(local loads the model in this process too)",
        )  # fmt: skip
    g.add_argument(
        "--replica-start-timeout", type=positive_float, default=300.0, metavar="S",
        help="wait this long for the first replica to run",
    )  # fmt: skip


def uses_ray(args: argparse.Namespace) -> bool:
    return getattr(args, "backend", "ray") == "ray"


def check_cluster_flags(args: argparse.Namespace, default: Callable[[str], Any]) -> None:
    """Contradictions and a missing Ray: before anything loads (``default``: the parser's
    default of a flag's dest)."""
    if not uses_ray(args):
        given = [f for f in RAY_FLAGS if hasattr(args, f) and getattr(args, f) != default(f)]
        if given:
            flag = "--" + given[0].replace("_", "-")
            raise UsageError(f"{flag} needs --backend ray")
        return
    if args.min_replicas is not None and args.max_replicas is None:
        raise UsageError("--min-replicas needs --max-replicas")
    if args.max_replicas is not None and args.min_replicas is None:
        args.min_replicas = 1
    if args.max_replicas is not None and args.max_replicas < args.min_replicas:
        raise UsageError("--max-replicas must be at least --min-replicas")
    if args.replica_gpus < 0:
        raise UsageError("--replica-gpus cannot be negative")
    if importlib.util.find_spec("ray") is None:
        raise UserError(
            "--backend ray needs Ray Serve, which is not installed: pip install 'streamcap[ray]'"
        )
    address = ray_address(args)
    if address != "auto":
        probe(address)


def ray_address(args: argparse.Namespace) -> str:
    return args.ray_address or os.environ.get("RAY_ADDRESS") or "auto"


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


def cluster_spec(args: argparse.Namespace) -> Any:
    from streamcap.cluster.wire import ClusterSpec, ReplicaSpec

    gpus = float(args.replica_gpus or 0)
    replica = ReplicaSpec(
        model=getattr(args, "model", None) or "base",
        assistant=getattr(args, "assistant", None),
        device=getattr(args, "device", "auto") or "auto",
        precision=getattr(args, "precision", "auto") or "auto",
        threads=args.replica_threads,
        gpus=gpus,
        language=getattr(args, "language", None),
    )
    return ClusterSpec(
        address=ray_address(args),
        app=args.app,
        replica=replica,
        replicas=args.replicas,
        min_replicas=args.min_replicas,
        max_replicas=args.max_replicas,
        inflight=args.replica_inflight or (8 if gpus > 0 else 2),
        affinity=args.affinity == "on",
        start_timeout_s=args.replica_start_timeout,
    )


def start_remote_worker(args: argparse.Namespace, capacity: Any) -> RemoteWorker:
    """The gateway's `RemoteWorker`: the model's card, the bridge, the fallback if asked;
    connected, the first replica running, the dispatcher started."""
    from streamcap.cli.common import load_engine
    from streamcap.cluster.remote import RemoteWorker
    from streamcap.cluster.remote_config import RemoteConfig
    from streamcap.cluster.transport import BridgeTransport, LocalTransport
    from streamcap.cluster.wire import model_fingerprint
    from streamcap.models.card import ModelCard
    from streamcap.runtime.worker import InferenceWorker

    spec = cluster_spec(args)
    card = ModelCard.load(spec.replica.model)
    fallback = None
    if getattr(args, "fallback", "none") == "local":
        local = InferenceWorker(load_engine(args), capacity=capacity)
        local.warm_up(getattr(args, "language", None))
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
    worker.warm_up(getattr(args, "language", None))
    worker.start()
    say(f"ray: {worker.health()}")
    return worker
