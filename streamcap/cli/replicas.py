"""`streamcap replicas`: start, show or delete inference replicas on a Ray cluster, without a
gateway (docs/scaling.md).

Replicas started here outlive the command: gateways attach to them with ``streamcap serve
--backend ray`` (no --replicas), and several gateways may share them. Serve places each replica
on any node with the CPUs (or GPUs) it asks for, so machines that joined the cluster with
``ray start --address HEAD:6379`` take replicas as soon as they are there.
"""

from __future__ import annotations

import argparse

from streamcap.cli.common import add_model_flags, say
from streamcap.errors import UserError


def add_arguments(p: argparse.ArgumentParser, command: str) -> None:
    from streamcap.cli.cluster import add_cluster_flags

    add_cluster_flags(p, backend=False)
    add_model_flags(p)
    what = p.add_mutually_exclusive_group()
    what.add_argument("--status", action="store_true", help="show the replicas and exit")
    what.add_argument("--delete", action="store_true", help="stop the replicas (delete the app)")
    p.set_defaults(func=run_replicas)


def run_replicas(args: argparse.Namespace) -> int:
    from streamcap.cli.cluster import check_cluster_flags, cluster_spec

    check_cluster_flags(args, args.command_parser.get_default)
    if not (args.status or args.delete or args.replicas or args.max_replicas):
        from streamcap.cli.common import UsageError

        raise UsageError("say how many: --replicas N or --min-replicas A --max-replicas B "
                         "(or --status, --delete)")  # fmt: skip
    spec = cluster_spec(args)
    from streamcap.cluster import control

    error = control.connect(spec.address)
    if error:
        raise UserError(error)
    if args.delete:
        gone = control.delete(spec.app)
        say(f"app {spec.app!r}: " + ("deleted" if gone else "not running"))
        return 0
    if not args.status:
        if control.replica_states(spec.app):
            say(f"app {spec.app!r} runs already: updating it (its replicas restart)")
        control.redeploy(spec)
        say(f"starting replicas of {spec.replica.model} ...")
        error = control.wait_running(spec)
        if error:
            raise UserError(error)
    states = control.replica_states(spec.app)
    if not states:
        say(f"app {spec.app!r}: not running")
        return 1 if args.status else 0
    counts = ", ".join(f"{n} {state.lower()}" for state, n in sorted(states.items()) if n)
    print(f"app {spec.app!r}: replicas {counts}")
    return 0
