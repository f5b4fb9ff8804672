"""Load test of the caption server: N publishers replay speech at real-time pace, M viewers each.

    python scripts/load_test.py --streams 2 --viewers 3 --seconds 120 --json out/load.json

Starts the real server (`streamcap serve`) as a subprocess on a loopback port, with --record
into a temporary folder. Each publisher replays the long-form meeting recording (default: the
shared eval-dev file, with its reference segments; otherwise the clips of tests/data with
pauses between them) from its own offset, looping, for `--seconds`. Reports, as JSON:

- final latency per stream and overall, p50/p95 (docs/design.md: for each reference segment, the
  wall time its last word first arrives in a final at the first viewer, minus the time that
  segment's end was sent; the caption word aligned to it by jiwer after Whisper's English
  normaliser, or the segment's last aligned word; segments with no aligned word are `missed`);
- dropped finals: finals the server recorded that a viewer did not receive (must be 0);
- partial events received (slow viewers may skip partials that newer ones replaced: allowed);
- the server's CPU (% of one core) and RSS over time (from /proc), the busy share of the whole
  machine (all cores; tells whether something else competed for the CPU), and the worker queue
  depth (from /metrics).

With ``--backend local,ray`` it runs the same load once per backend, one after the other in one
invocation, and prints them side by side. ``ray`` runs the server as the gateway of Ray Serve
replicas (``--replicas N --replica-threads T``) on the cluster at ``--ray-address``, or on a
one-node cluster on loopback that the script starts and stops itself (``--ray-address local``,
the default). For it the report adds, from /metrics and /proc: each replica's decodes and busy
share, the requests lost and resent, the transport's cost (round trip minus the replica's own
time), and the gateway's CPU per stream (the server process: VAD, policy, fan-out; its Ray
bridge process is reported apart).
Linux only (/proc). Needs nothing beyond the project's dependencies (and ray[serve] for ray).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path
from typing import Any

from streamcap.core.constants import SAMPLE_RATE
from streamcap.evaluation.busy import busy_processes
from streamcap.evaluation.load_clients import (
    LoadPlan,
    ViewerLog,
    delivered,
    publish_all,
    sort_closes,
    start_viewers,
)
from streamcap.evaluation.load_program import LONGFORM, load_program, program_for, turns_of
from streamcap.evaluation.load_report import (
    brief,
    print_side_by_side,
    server_figures,
    stream_report,
)
from streamcap.evaluation.load_server import (
    ProcStats,
    Sampler,
    cluster_report,
    scrape,
    serving,
)
from streamcap.evaluation.metrics import percentile
from streamcap.evaluation.paths import ROOT

SR = SAMPLE_RATE


def load_plan(args: argparse.Namespace) -> LoadPlan:
    """Each publisher's stream and program: the reference from its own offset, looped for
    `--seconds`; with `--room`, the whole reference split by turns between them."""
    program = load_program(None if args.clips else args.reference)
    dur = len(program.audio) / SR
    streams = [f"load{i}" for i in range(args.streams)]
    if args.room:  # one room, its publishers taking turns (each publisher: a speaker name)
        whole = program_for(program, 0.0, args.seconds)
        programs = [turns_of(whole, i, len(streams)) for i in range(len(streams))]
    else:
        programs = [
            program_for(program, dur * i / args.streams, args.seconds) for i in range(len(streams))
        ]
    return LoadPlan(streams, programs, room=args.room)


async def run_load(args: argparse.Namespace, port: int, record: Path) -> dict[str, Any]:
    """One load run against the server on ``port`` (recording into ``record``): viewers
    first, then the publishers; after they close, the finals still coming are waited for
    (`drain`), and every stream is reported against its reference."""
    base = f"ws://127.0.0.1:{port}"
    metrics_url = f"http://127.0.0.1:{port}/metrics"
    plan = load_plan(args)
    stop = asyncio.Event()
    viewers, vtasks = start_viewers(base, plan, args.viewers, stop)
    await asyncio.sleep(0.5)
    sampler = Sampler(args._server_pid, metrics_url, args.sample_every)
    bridge = ProcStats(args._bridge_pid) if args._bridge_pid else None
    if bridge is not None:
        bridge.sample()
    sample_task = asyncio.create_task(sampler.run())
    results, t0s = await publish_all(base, plan, args.stagger)
    closed_at = time.monotonic()
    refused, late_close = sort_closes(plan.streams, results)
    await drain(plan.streams, viewers, record, port, args.drain_timeout)
    await asyncio.sleep(2.0)
    stop.set()
    await asyncio.gather(*vtasks, return_exceptions=True)
    sample_task.cancel()
    wall = time.monotonic() - sampler.t_start
    cluster = cluster_report(metrics_url, wall, bridge)
    t0s = {s: t0s.get(s, sampler.t_start) for s in plan.streams}
    per_stream, all_lat = stream_reports(plan, viewers, record, refused, t0s, closed_at)
    report: dict[str, Any] = {
        "streams": per_stream,
        "errors": [
            repr(r)
            for s, r in zip(plan.streams, results, strict=True)
            if r and s not in refused | late_close
        ],
        "refused_streams": sorted(refused),
        "closed_before_finals_out": sorted(late_close),
    }
    report.update(run_figures(args, per_stream, all_lat))
    report.update({**server_figures(sampler.samples, args.streams), **cluster})
    report["samples"] = sampler.samples
    return report


def run_figures(
    args: argparse.Namespace, per_stream: dict[str, dict[str, Any]], all_lat: list[float]
) -> dict[str, Any]:
    """What was run, and the latencies, misses and drops of all streams together."""
    return {
        "backend": args._backend,
        "n_streams": args.streams,
        "server": f"{args.server_root} {' '.join(args.server_arg)}".strip(),
        "viewers_per_stream": args.viewers,
        "seconds": args.seconds,
        "audio": str(args.reference) if not args.clips else "tests/data clips",
        "final_latency_p50": percentile(all_lat, 50),
        "final_latency_p95": percentile(all_lat, 95),
        "segments_measured": len(all_lat),
        "missed_segments": sum(r.get("missed_segments", 0) for r in per_stream.values()),
        "dropped_finals": sum(
            sum(r.get("dropped_finals_per_viewer", [])) for r in per_stream.values()
        ),
    }


def stream_reports(
    plan: LoadPlan,
    viewers: dict[str, list[ViewerLog]],
    record: Path,
    refused: set[str],
    t0s: dict[str, float],
    closed_at: float,
) -> tuple[dict[str, dict[str, Any]], list[float]]:
    """Each stream's report (`load_report.stream_report`; a refused one only says so) and
    every latency measured, all streams together."""
    reports: dict[str, dict[str, Any]] = {}
    all_lat: list[float] = []
    for i, s in enumerate(plan.streams):
        if s in refused:  # admission control said no at once: nothing was promised
            reports[s] = {"refused": True}
            continue
        reports[s], lat = stream_report(plan, i, viewers[s], record, t0s[s], closed_at)
        all_lat += lat
    return reports, all_lat


async def drain(
    streams: list[str], viewers: dict[str, list[ViewerLog]], record: Path, port: int,
    timeout: float,
) -> None:  # fmt: skip
    """The publishers' close (1000) follows their last final. A server that closed before its
    finals were out (or says so with 1013) may still deliver them: wait until its worker has
    nothing queued and every recorded final reached the viewers (at most ``timeout`` s), and
    count what came after the close as late. (Before this wait, a server that closed 1000 too
    early showed finals "recorded but never received": the viewers had left.)"""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not (
        delivered(streams, viewers, record) and await asyncio.to_thread(worker_idle, port)
    ):
        await asyncio.sleep(0.5)


def worker_idle(port: int) -> bool:
    """Nothing waits for the server's worker (a final still queued is yet to be recorded)."""
    try:
        return scrape(f"http://127.0.0.1:{port}/metrics").get("streamcap_queue_depth", 0) == 0
    except OSError:
        return True


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--streams", type=int, default=1, help="publishers (N)")
    p.add_argument("--viewers", type=int, default=1, help="viewers per stream (M)")
    p.add_argument(
        "--room",
        action="store_true",
        help="the N publishers are speakers P0..P(N-1) of one room, taking turns "
        "(the reference's segments go round them)",
    )
    p.add_argument("--seconds", type=float, default=60.0, help="audio per publisher (S)")
    p.add_argument("--model", default="base")
    p.add_argument("--threads", type=int, default=None, help="torch threads in the server")
    p.add_argument("--reference", type=Path, default=LONGFORM, help="long-form reference JSON")
    p.add_argument("--clips", action="store_true", help="use tests/data clips instead")
    p.add_argument("--stagger", type=float, default=0.37, help="seconds between publisher starts")
    p.add_argument("--sample-every", type=float, default=2.0, help="seconds between samples")
    p.add_argument("--json", type=Path, help="write the report here (default: stdout only)")
    p.add_argument(
        "--drain-timeout", type=float, default=120.0,
        help="after the publishers closed, wait up to this long for recorded finals to arrive",
    )  # fmt: skip
    p.add_argument(
        "--server-root", type=Path, default=ROOT,
        help="run the server of this checkout (e.g. a worktree of an older commit)",
    )  # fmt: skip
    p.add_argument(
        "--server-arg", action="append", default=[], metavar="ARG",
        help="extra `streamcap serve` argument (repeat), e.g. --server-arg=--no-admission",
    )  # fmt: skip
    p.add_argument(
        "--backend", default="local",
        help="local, ray, or both in turn (local,ray): one run each, reported side by side",
    )  # fmt: skip
    p.add_argument(
        "--ray-address", default="local",
        help="the Ray cluster for --backend ray: HOST:PORT, or local = start a one-node "
        "cluster on loopback for the run (2 CPUs) and stop it after",
    )  # fmt: skip
    p.add_argument("--busy", type=int, default=0, metavar="N",
                   help="N other processes keep one core busy each while the publishers run "
                   "(the machine shared with other work: `evaluation.busy`)")  # fmt: skip
    p.add_argument("--replicas", type=int, default=2, help="replicas for --backend ray")
    p.add_argument(
        "--max-replicas", type=int, default=None,
        help="autoscale the ray backend between --replicas and this (Serve's autoscaler)",
    )  # fmt: skip
    p.add_argument("--replica-threads", type=int, default=1, help="threads per replica")
    return p


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    backends = [b.strip() for b in args.backend.split(",") if b.strip()]
    if not backends or set(backends) - {"local", "ray"}:
        p.error("--backend: local, ray or local,ray")
    reports = {}
    for backend in backends:
        if backend == "ray" and args.ray_address == "local":
            from streamcap.cluster.local_head import local_head

            with local_head(num_cpus=2) as head:
                reports[backend] = run_backend(args, backend, head.address)
        else:
            reports[backend] = run_backend(args, backend, args.ray_address)
    report: dict[str, Any] = reports[backends[0]] if len(backends) == 1 else reports
    summary = {b: brief(r) for b, r in reports.items()}
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(summary if len(backends) > 1 else summary[backends[0]], indent=2))
    if len(backends) > 1:
        print_side_by_side(summary)
    ok = all(r["dropped_finals"] == 0 and not r["errors"] for r in reports.values())
    return 0 if ok else 1


def run_backend(args: argparse.Namespace, backend: str, address: str) -> dict[str, Any]:
    with serving(args, backend, address) as (port, record), busy_processes(args.busy):
        report = asyncio.run(run_load(args, port, record))
    report["busy_processes"] = args.busy
    return report


if __name__ == "__main__":
    raise SystemExit(main())
