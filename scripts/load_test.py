#!/usr/bin/env python3
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
import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# the sibling modules (scripts/): what is sent, the server, the report
from load_program import LONGFORM, load_program, program_for, turns_of  # noqa: E402
from load_report import brief, final_latencies, print_side_by_side  # noqa: E402
from load_server import MachineCpu, ProcStats, cluster_report, scrape, serving  # noqa: E402
from reference_alignment import percentile as pct  # noqa: E402 - scripts/soak.py's name

from streamcap.core.constants import SAMPLE_RATE  # noqa: E402
from streamcap.server.client import publish, watch, ws_url  # noqa: E402

SR = SAMPLE_RATE


# --------------------------------------------------------------------------- clients


@dataclass
class ViewerLog:
    events: list[tuple[float, dict[str, Any]]] = field(default_factory=list)
    error: str | None = None


async def run_viewer(url: str, log: ViewerLog, stop: asyncio.Event) -> None:
    async def consume() -> None:
        async for ev in watch(url):
            log.events.append((time.monotonic(), ev))

    task = asyncio.create_task(consume())
    stopper = asyncio.create_task(stop.wait())
    done, _ = await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
    for t in (task, stopper):
        t.cancel()
    if task in done and task.exception() is not None:
        log.error = repr(task.exception())


async def run_load(args: argparse.Namespace, port: int, record: Path) -> dict[str, Any]:
    base = f"ws://127.0.0.1:{port}"
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

    def room_of(s: str) -> str:
        return "room" if args.room else s

    def speaker_of(s: str) -> str | None:
        return f"P{streams.index(s)}" if args.room else None

    viewers = {s: [ViewerLog() for _ in range(args.viewers)] for s in streams}
    stop = asyncio.Event()
    vtasks = [
        asyncio.create_task(run_viewer(ws_url(base, "captions", room_of(s)), v, stop))
        for s in streams
        for v in viewers[s]
    ]
    await asyncio.sleep(0.5)
    proc = ProcStats(args._server_pid)
    proc.sample()
    machine = MachineCpu()
    samples: list[dict[str, float]] = []
    t_start = time.monotonic()

    nan = float("nan")

    async def sampler() -> None:
        while True:
            await asyncio.sleep(args.sample_every)
            cpu, rss = proc.sample()
            m = await asyncio.to_thread(scrape, f"http://127.0.0.1:{port}/metrics")
            samples.append(
                {
                    "t": round(time.monotonic() - t_start, 1),
                    "cpu_pct": round(cpu, 1),
                    "machine_busy_pct": round(machine.sample(), 1),
                    "rss_mb": round(rss, 1),
                    "queue_depth": m.get("streamcap_queue_depth", float("nan")),
                    "replicas_running": m.get("streamcap_replicas_running", float("nan")),
                    "viewers": m.get("streamcap_viewers", float("nan")),
                    "heap_in_use_mb": m.get('streamcap_heap_bytes{kind="in_use"}', nan) / 1e6,
                    "heap_free_mb": m.get('streamcap_heap_bytes{kind="free"}', nan) / 1e6,
                    "finals_in_memory": m.get("streamcap_finals_in_memory", nan),
                }
            )

    bridge = ProcStats(args._bridge_pid) if args._bridge_pid else None
    if bridge is not None:
        bridge.sample()
    sample_task = asyncio.create_task(sampler())
    t0s: dict[str, float] = {}
    first_frame: dict[str, float] = {}

    async def publisher(i: int, stream: str) -> None:
        await asyncio.sleep(i * args.stagger)

        def on_frame(_: float) -> None:
            first_frame.setdefault(stream, time.monotonic())

        try:
            url = ws_url(base, "ingest", room_of(stream), speaker=speaker_of(stream))
            await publish(url, programs[i].audio, SR, on_frame=on_frame)
        finally:
            # Frame k (k = 0, 1, ...) leaves at t0 + k * 0.1: audio time t was sent by t0 + t.
            if stream in first_frame:
                t0s[stream] = first_frame[stream]

    results = await asyncio.gather(
        *(publisher(i, s) for i, s in enumerate(streams)), return_exceptions=True
    )
    closed_at = time.monotonic()
    # 1013 at the start: admission control refused the stream; 1013 after `stop`: the server
    # says its last finals were still decoding (they still come, and are measured)
    refused = {
        s
        for s, r in zip(streams, results, strict=True)
        if _close_code(r) == 1013 and "full" in str(r)
    }
    late_close = {
        s
        for s, r in zip(streams, results, strict=True)
        if _close_code(r) == 1013 and s not in refused
    }
    # The publishers' close (1000) follows their last final. A server that closed before its
    # finals were out (or says so with 1013) may still deliver them: wait until its worker has
    # nothing queued and every recorded final reached the viewers (bounded), and count what
    # came after the close as late. (Before this wait, a server that closed 1000 too early
    # showed finals "recorded but never received": the viewers had left.)
    deadline = time.monotonic() + args.drain_timeout
    while time.monotonic() < deadline and not (
        _delivered(streams, viewers, record) and await asyncio.to_thread(_worker_idle, port)
    ):
        await asyncio.sleep(0.5)
    await asyncio.sleep(2.0)
    stop.set()
    await asyncio.gather(*vtasks, return_exceptions=True)
    sample_task.cancel()
    wall = time.monotonic() - t_start
    cluster = cluster_report(f"http://127.0.0.1:{port}/metrics", wall, bridge)

    report: dict[str, Any] = {
        "streams": {},
        "errors": [
            repr(r)
            for s, r in zip(streams, results, strict=True)
            if r and s not in refused | late_close
        ],
        "refused_streams": sorted(refused),
        "closed_before_finals_out": sorted(late_close),
    }
    all_lat: list[float] = []
    dropped_total = 0
    missed_total = 0
    for i, s in enumerate(streams):
        path = record / f"{room_of(s)}.jsonl"
        recorded = [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []
        if args.room:
            recorded = [r for r in recorded if r.get("speaker") == speaker_of(s)]
        rec_seqs = {r["seq"] for r in recorded}
        first = viewers[s][0]
        finals = [
            (t, ev["text"])
            for t, ev in first.events
            if ev["type"] == "final" and ev.get("speaker") == speaker_of(s)
        ]
        if s in refused:  # admission control said no at once: nothing was promised
            report["streams"][s] = {"refused": True}
            continue
        timed, missed = final_latencies(programs[i].segments, finals, t0s.get(s, t_start))
        lat = [x for _, x in timed]
        late = sum(t > closed_at + 2.0 for t, _ in finals)
        dropped = [
            len(
                rec_seqs
                - {
                    ev["seq"]
                    for _, ev in v.events
                    if ev["type"] == "final" and ev.get("speaker") == speaker_of(s)
                }
            )
            for v in viewers[s]
        ]
        partials = [sum(ev["type"] == "partial" for _, ev in v.events) for v in viewers[s]]
        all_lat += lat
        dropped_total += sum(dropped)
        missed_total += missed
        report["streams"][s] = {
            "segments": len(programs[i].segments),
            "missed_segments": missed,
            "final_latency_p50": pct(lat, 50),
            "final_latency_p95": pct(lat, 95),
            "final_latency_max": max(lat) if lat else None,
            "finals_recorded": len(recorded),
            "finals_after_publishers_closed": late,
            "dropped_finals_per_viewer": dropped,
            "partials_received_per_viewer": partials,
            "viewer_errors": [v.error for v in viewers[s] if v.error],
            "latency_by_segment_end": [[round(a, 2), round(b, 3)] for a, b in timed],
        }
    rss = [x["rss_mb"] for x in samples]
    cpu = [x["cpu_pct"] for x in samples]
    half = len(rss) // 2
    slope = None
    if half >= 2:
        ts = np.array([x["t"] for x in samples[half:]])
        slope = float(np.polyfit(ts / 60.0, np.array(rss[half:]), 1)[0])
    cpu_mean = statistics.fmean(cpu[1:]) if len(cpu) > 1 else None
    report.update(
        {
            "backend": args._backend,
            "n_streams": args.streams,
            "server": f"{args.server_root} {' '.join(args.server_arg)}".strip(),
            "viewers_per_stream": args.viewers,
            "seconds": args.seconds,
            "audio": str(args.reference) if not args.clips else "tests/data clips",
            "final_latency_p50": pct(all_lat, 50),
            "final_latency_p95": pct(all_lat, 95),
            "segments_measured": len(all_lat),
            "missed_segments": missed_total,
            "dropped_finals": dropped_total,
            "server_cpu_pct_mean": cpu_mean,
            "server_cpu_pct_per_stream": cpu_mean / args.streams if cpu_mean else None,
            "machine_cores": os.cpu_count(),
            "machine_busy_pct_mean": (
                statistics.fmean(x["machine_busy_pct"] for x in samples) if samples else None
            ),
            "server_rss_mb_start": rss[0] if rss else None,
            "server_rss_mb_max": max(rss) if rss else None,
            "server_rss_mb_end": rss[-1] if rss else None,
            "server_rss_slope_mb_per_min_second_half": slope,
            "queue_depth_max": max((x["queue_depth"] for x in samples), default=None),
            **cluster,
            "samples": samples,
        }
    )
    return report


def _close_code(result: object) -> int | None:
    """The close code of a publisher's failure (PublishError or ConnectionClosed), if any."""
    code = getattr(result, "code", None)
    rcvd = getattr(result, "rcvd", None)
    if code is None and rcvd is not None:
        code = rcvd.code
    return code if isinstance(code, int) else None


def _worker_idle(port: int) -> bool:
    """Nothing waits for the server's worker (a final still queued is yet to be recorded)."""
    try:
        return scrape(f"http://127.0.0.1:{port}/metrics").get("streamcap_queue_depth", 0) == 0
    except OSError:
        return True


def _delivered(streams: list[str], viewers: dict[str, list[ViewerLog]], record: Path) -> bool:
    """Every final recorded so far has reached every viewer of its stream."""
    for s in streams:
        path = record / f"{s}.jsonl"
        if not path.exists():
            continue
        seqs = {json.loads(x)["seq"] for x in path.read_text().splitlines() if x.strip()}
        for v in viewers[s]:
            if seqs - {ev["seq"] for _, ev in v.events if ev["type"] == "final"}:
                return False
    return True


def main(argv: list[str] | None = None) -> int:
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
    p.add_argument("--replicas", type=int, default=2, help="replicas for --backend ray")
    p.add_argument(
        "--max-replicas", type=int, default=None,
        help="autoscale the ray backend between --replicas and this (Serve's autoscaler)",
    )  # fmt: skip
    p.add_argument("--replica-threads", type=int, default=1, help="threads per replica")
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
    with serving(args, backend, address) as (port, record):
        return asyncio.run(run_load(args, port, record))


if __name__ == "__main__":
    raise SystemExit(main())
