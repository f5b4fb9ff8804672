"""`streamcap replicas`: start, show or delete inference replicas on a Ray cluster, without a
gateway (docs/scaling.md).

Replicas started here outlive the command: gateways attach to them with ``streamcap serve
--backend ray`` (no --replicas), and several gateways may share them. Serve places each replica
on any node with the CPUs (or GPUs) it asks for, so machines that joined the cluster with
``ray start --address HEAD:6379`` take replicas as soon as they are there.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

from streamcap.cli.cluster import RAY, ClusterOptions, add_cluster_flags
from streamcap.cli.common import UsageError, say
from streamcap.cli.model_options import ModelOptions, TaskOptions, add_model_flags
from streamcap.errors import UserError


@dataclass(frozen=True)
class ReplicasCommand:
    """Everything `streamcap replicas` is asked, built once from its flags (`from_args`)."""

    cluster: ClusterOptions = field(default_factory=lambda: ClusterOptions(backend=RAY))
    model: ModelOptions = field(default_factory=ModelOptions)
    task: TaskOptions = field(default_factory=TaskOptions)
    status: bool = False  # show the replicas and exit
    delete: bool = False  # stop them

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> ReplicasCommand:
        model = ModelOptions.from_args(args)
        cluster = ClusterOptions.from_args(args)
        spec = cluster.spec
        if not (args.status or args.delete or spec.replicas or spec.max_replicas):
            raise UsageError("say how many: --replicas N or --min-replicas A --max-replicas B "
                             "(or --status, --delete)")  # fmt: skip
        return cls(
            cluster=cluster,
            model=model,
            task=TaskOptions.from_args(args),
            status=args.status,
            delete=args.delete,
        )


def add_arguments(p: argparse.ArgumentParser, command: str) -> None:
    add_cluster_flags(p, backend=False)
    add_model_flags(p)
    what = p.add_mutually_exclusive_group()
    what.add_argument("--status", action="store_true", help="show the replicas and exit")
    what.add_argument("--delete", action="store_true", help="stop the replicas (delete the app)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """The command's edge: its flags become `ReplicasCommand`, which is all that goes on."""
    return replicas(ReplicasCommand.from_args(args))


def replicas(cmd: ReplicasCommand) -> int:
    from streamcap.cli.cluster import check_ray
    from streamcap.cluster import control

    check_ray(cmd.cluster)
    spec = cmd.cluster.spec_for(cmd.model, cmd.task)
    error = control.connect(spec.address)
    if error:
        raise UserError(error)
    if cmd.delete:
        gone = control.delete(spec.app)
        say(f"app {spec.app!r}: " + ("deleted" if gone else "not running"))
        return 0
    if not cmd.status:
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
        return 1 if cmd.status else 0
    counts = ", ".join(f"{n} {state.lower()}" for state, n in sorted(states.items()) if n)
    print(f"app {spec.app!r}: replicas {counts}")
    return 0
