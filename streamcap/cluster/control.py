"""Connecting to a Ray cluster and managing the replicas' Serve application.

Shared by the bridge (a gateway's driver) and `streamcap replicas` (which deploys, shows or
deletes replicas without a gateway). Every failure a person can act on comes back as one line.
"""

from __future__ import annotations

import logging
import time

import ray
from ray import serve

from streamcap.cluster.replica import DEPLOYMENT, deployment
from streamcap.cluster.transport import Status
from streamcap.cluster.wire import ClusterSpec

log = logging.getLogger("streamcap.cluster")


def first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:300] if text else type(e).__name__


def connect(address: str) -> str | None:
    """Join the cluster at ``address`` as a driver, and start Serve's controller there if it
    does not run; None, or why not."""
    try:
        ray.init(
            address=address,
            namespace="streamcap",
            log_to_driver=False,
            logging_level=logging.WARNING,
        )
    except ConnectionError:
        return (
            "no Ray cluster on this machine (--ray-address auto): start one with "
            "'ray start --head', or pass --ray-address HOST:PORT"
        )
    except Exception as e:  # e.g. "No node info found": this machine is not a node
        return (
            f"cannot connect to the Ray cluster at {address}: {first_line(e)} (this machine "
            f"must be one of its nodes: 'ray start --address {address} --num-cpus 0')"
        )
    logging.getLogger("ray.serve").setLevel(logging.WARNING)
    serve.start(proxy_location="Disabled")
    return None


def ensure_app(spec: ClusterSpec) -> tuple[bool, str | None]:
    """Attach to ``spec.app`` if it runs, else deploy it when ``spec`` says how many replicas
    (a redeploy would restart every replica, so a running app is never redeployed);
    returns (deployed by this call, error)."""
    if spec.app in serve.status().applications:
        return False, None
    if not spec.deploys:
        return False, (
            f"no streamcap replicas (app {spec.app!r}) on the Ray cluster: start them "
            "with 'streamcap replicas --replicas N', or pass --replicas"
        )
    redeploy(spec)
    return True, None


def redeploy(spec: ClusterSpec) -> None:
    """Deploy ``spec`` over the running app (Serve restarts every replica, rolling)."""
    serve._run(deployment(spec), _blocking=False, name=spec.app, route_prefix=None)


def wait_running(spec: ClusterSpec) -> str | None:
    """Until one replica runs (None), the app fails, or the start timeout passes."""
    deadline = time.monotonic() + spec.start_timeout_s
    while True:
        app = serve.status().applications.get(spec.app)
        if app is not None:
            dep = app.deployments.get(DEPLOYMENT)
            if dep is not None and dep.replica_states.get("RUNNING", 0) > 0:
                return None
            if str(app.status).endswith("DEPLOY_FAILED"):
                lines = (app.message or "").strip().splitlines()
                why = next((ln for ln in reversed(lines) if ln.strip()), "no message")
                return f"the replicas failed to start: {why.strip()[:300]}"
        if time.monotonic() > deadline:
            free = ray.available_resources().get("CPU", 0)
            gpus = f" and {spec.replica.gpus:g} GPU" if spec.replica.gpus else ""
            return (
                f"no replica running after {spec.start_timeout_s:.0f} s: the cluster has "
                f"{free:g} free CPU(s), each replica takes {spec.replica.threads}{gpus}"
            )
        time.sleep(0.5)


def app_status(app_name: str) -> Status:
    """The app's replicas as Serve sees them (counts by state, and the live replicas' ids)."""
    try:
        app = serve.status().applications.get(app_name)
        prefix = f"SERVE_REPLICA::{app_name}#{DEPLOYMENT}#"
        names = ray.util.list_named_actors(all_namespaces=True)
    except Exception as e:
        return Status(False, 0, error=f"cannot reach the Ray cluster: {first_line(e)}")
    if app is None or DEPLOYMENT not in app.deployments:
        return Status(True, 0, error=f"the app {app_name!r} is gone from the cluster")
    states = app.deployments[DEPLOYMENT].replica_states
    ids = frozenset(
        n["name"][len(prefix) :] for n in names if str(n.get("name", "")).startswith(prefix)
    )
    running = int(states.get("RUNNING", 0))
    target = sum(int(v) for k, v in states.items() if str(k) not in ("STOPPING", "STOPPED"))
    return Status(True, running, target, ids)


def replica_states(app_name: str) -> dict[str, int]:
    """Replicas of ``app_name`` by state (empty when the app does not exist)."""
    app = serve.status().applications.get(app_name)
    if app is None or DEPLOYMENT not in app.deployments:
        return {}
    return {str(k): int(v) for k, v in app.deployments[DEPLOYMENT].replica_states.items()}


def delete(app_name: str) -> bool:
    """Delete the app (its replicas stop); False when it did not exist."""
    if app_name not in serve.status().applications:
        return False
    try:
        serve.delete(app_name)
    except Exception as e:
        log.warning("could not delete app %r: %s", app_name, e)
    return True
