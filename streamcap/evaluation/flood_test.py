"""A flooding publisher against a real `streamcap serve`, side by side with the calm case.

    python scripts/flood_test.py [--seconds 40] [--kind frames|download] [--json out/flood.json]

Starts `streamcap serve` (bundled base model) on a loopback port. Phase 1: one honest publisher
replays speech clips (tests/data, with pauses) at real-time pace while a viewer collects its
finals. Phase 2: the same, while an attacker in a process of its own floods the server, on as
many connections as it takes (it reconnects whenever one is closed): `--kind frames` sends
empty binary frames as fast as it can; `--kind download` fetches `/streams/big.vtt`, a
recording of 10 000 finals of 14 words (about 1.3 MB of WebVTT), in a loop.
Prints the honest stream's final latency (the pipeline's `latency_ms`) p50/p95 in both phases
and their ratio, how long a `/healthz` probe every 0.5 s waited (the event loop's answer),
how many messages and connections the attacker sent, and the server's CPU time per phase.
Loopback only; the attack stops by itself after the phase.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf

from streamcap.core.constants import SAMPLE_RATE
from streamcap.evaluation.load_server import ProcStats
from streamcap.evaluation.metrics import percentile
from streamcap.evaluation.output import fmt
from streamcap.evaluation.paths import TEST_DATA
from streamcap.evaluation.serve_process import ServeProcess
from streamcap.server.client import publish, watch, ws_url

SR = SAMPLE_RATE
CLIPS = ("en_real_jfk", "en_real_librivox_0870", "en_real_praatio_mary", "en_real_librivox_0880")


def program(seconds: float) -> np.ndarray:
    """The test clips with 1.2 s pauses, looped, ``seconds`` long."""
    parts: list[np.ndarray] = []
    total = 0.0
    while total < seconds:
        for clip in CLIPS:
            audio, rate = sf.read(TEST_DATA / f"{clip}.wav", dtype="float32")
            assert rate == SR
            parts += [audio, np.zeros(int(1.2 * SR), np.float32)]
            total += len(audio) / SR + 1.2
    return np.concatenate(parts)[: int(seconds * SR)]


BIG = "big"  #: the recording the downloading attacker fetches


def write_big_recording(record_dir: Path, finals: int = 10_000) -> None:
    """A recording of `finals` finals of about 14 words each, as `--record DIR` keeps one."""
    from streamcap.core.captions import Caption

    words = [
        "so",
        "the",
        "next",
        "thing",
        "we",
        "looked",
        "at",
        "was",
        "the",
        "budget",
        "for",
        "the",
        "spring",
        "release",
    ]
    with (record_dir / f"{BIG}.jsonl").open("w", encoding="utf-8") as f:
        for seq in range(1, finals + 1):
            text = " ".join(words[(seq + i) % len(words)] for i in range(14)).capitalize() + "."
            t = 3.0 * seq
            cap = Caption("final", BIG, seq, seq, text, t, t + 2.5, len(text), 900.0, "ep0")
            f.write(json.dumps(cap.to_dict()) + "\n")


def run_attacker(base: str, seconds: float, kind: str) -> None:
    """The attacking process: flood for `seconds`, then print what it sent as JSON."""
    counts = {"connections": 0, "messages": 0, "closed": 0, "bytes": 0}

    async def main() -> None:
        stop = asyncio.Event()
        asyncio.get_running_loop().call_later(seconds, stop.set)
        await (downloader if kind == "download" else attacker)(base, stop, counts)

    asyncio.run(main())
    print(json.dumps(counts))


async def attacker(base: str, stop: asyncio.Event, counts: dict[str, int]) -> None:
    from websockets.asyncio.client import connect
    from websockets.exceptions import ConnectionClosed

    start = json.dumps({"type": "start", "sample_rate": SR, "format": "pcm_s16le"})
    n = 0
    while not stop.is_set():
        n += 1
        try:
            async with connect(ws_url(base, "ingest", f"flood-{n % 4}")) as ws:
                counts["connections"] += 1
                await ws.send(start)
                await ws.recv()
                while not stop.is_set():
                    await ws.send(b"")
                    counts["messages"] += 1
        except (ConnectionClosed, OSError):
            counts["closed"] += 1
            await asyncio.sleep(0)


async def downloader(base: str, stop: asyncio.Event, counts: dict[str, int]) -> None:
    """GET /streams/big.vtt in a loop, each read whole (a 'messages' count is one download)."""
    host, port = base.removeprefix("ws://").rsplit(":", 1)
    request = f"GET /streams/{BIG}.vtt HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode()
    while not stop.is_set():
        try:
            reader, writer = await asyncio.open_connection(host, int(port))
            counts["connections"] += 1
            writer.write(request)
            while chunk := await reader.read(1 << 20):
                counts["bytes"] += len(chunk)
            counts["messages"] += 1
            writer.close()
        except OSError:
            counts["closed"] += 1
            await asyncio.sleep(0)


async def collect_latencies(url: str, latencies: list[float]) -> None:
    """Each final's own latency (the pipeline's ``latency_ms``), as a viewer receives them."""
    async for ev in watch(url):
        if ev.get("type") == "final" and ev.get("text", "").strip():
            latencies.append(ev["latency_ms"] / 1000.0)


async def probe_health(base: str, waits: list[float]) -> None:
    """The event loop's responsiveness: how long /healthz takes, every 0.5 s."""
    host, port = base.removeprefix("ws://").rsplit(":", 1)
    request = f"GET /healthz HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode()
    while True:
        t0 = time.perf_counter()
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(request)
        await reader.read()
        writer.close()
        waits.append(time.perf_counter() - t0)
        await asyncio.sleep(0.5)


async def phase(
    base: str, audio: np.ndarray, stream: str, flood: bool, kind: str
) -> dict[str, Any]:
    """One honest publisher with a viewer and the health probe; with ``flood``, an attacker
    in a process of its own meanwhile. The honest stream's figures (and the attacker's count)."""
    latencies: list[float] = []
    health: list[float] = []
    counts: dict[str, int] = {}
    viewer = asyncio.create_task(collect_latencies(ws_url(base, "captions", stream), latencies))
    prober = asyncio.create_task(probe_health(base, health))
    attack = None
    if flood:  # a process of its own, as a real attacker would be (no shared GIL with us)
        cmd = [sys.executable, "-m", "streamcap.evaluation.flood_test", "--attack", base,
               "--attack-seconds", str(len(audio) / SR), "--kind", kind]  # fmt: skip
        attack = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    try:
        await publish(ws_url(base, "ingest", stream), audio, SR)
        await asyncio.sleep(1.0)
    finally:
        for task in (viewer, prober):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if attack is not None:
            out, _ = attack.communicate(timeout=120)
            counts = json.loads(out.strip().splitlines()[-1])
    p50 = percentile(health, 50)
    return {
        "finals": len(latencies),
        "latency_p50_s": percentile(latencies, 50),
        "latency_p95_s": percentile(latencies, 95),
        "healthz_p50_ms": 1000 * p50 if p50 is not None else None,
        "healthz_max_ms": 1000 * max(health) if health else None,
        **({"attacker": counts} if flood else {}),
    }


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=40.0, help="speech per phase (default 40)")
    ap.add_argument("--json", type=Path, help="write the figures here")
    ap.add_argument(
        "--kind",
        choices=["frames", "download"],
        default="frames",
        help="the flood: empty audio frames, or subtitle downloads of a 10 000-final recording",
    )
    ap.add_argument("--attack", metavar="WS_BASE", help=argparse.SUPPRESS)
    ap.add_argument("--attack-seconds", type=float, default=40.0, help=argparse.SUPPRESS)
    return ap


def main() -> int:
    args = parser().parse_args()
    if args.attack:
        run_attacker(args.attack, args.attack_seconds, args.kind)
        return 0
    audio = program(args.seconds)
    extra: list[str] = []
    record = tempfile.TemporaryDirectory(prefix="flood-record-")
    if args.kind == "download":
        write_big_recording(Path(record.name))
        extra += ["--record", record.name]
    server = None
    try:
        server = ServeProcess(*extra)
        out: dict[str, Any] = {}
        for name, flood in (("calm", False), ("flood", True)):
            cpu0 = ProcStats(server.proc.pid).cpu_seconds()
            out[name] = asyncio.run(phase(server.ws, audio, f"honest-{name}", flood, args.kind))
            cpu = ProcStats(server.proc.pid).cpu_seconds() - cpu0
            out[name]["server_cpu_s"] = round(cpu, 2)
    finally:
        if server is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                server.stop(timeout=30)
        record.cleanup()
    print_phases(out, args.kind)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=1))
    return 0


def print_phases(out: dict[str, Any], kind: str) -> None:
    """Both phases' figures, what the attacker sent, and the flood / calm ratios."""
    calm, flood = out["calm"], out["flood"]
    for name in ("calm", "flood"):
        r = out[name]
        print(
            f"{name:6s} finals {r['finals']:3d}  final latency p50 {fmt(r['latency_p50_s'])} s "
            f"p95 {fmt(r['latency_p95_s'])} s  /healthz p50 {fmt(r['healthz_p50_ms'], '.0f')} ms "
            f"max {fmt(r['healthz_max_ms'], '.0f')} ms  server CPU {r['server_cpu_s']:.1f} s"
        )
    a = flood["attacker"]
    if kind == "download":
        print(
            f"attacker: {a['messages']} whole downloads of {BIG}.vtt "
            f"({a['bytes'] / 1e6:.0f} MB) on {a['connections']} connections"
        )
    else:
        print(
            f"attacker: {a['messages']} empty frames sent on {a['connections']} connections "
            f"({a['messages'] / max(1, a['connections']):.0f} per connection until it saw "
            "the close)"
        )
    print(
        f"flood/calm: p50 {ratio(flood['latency_p50_s'], calm['latency_p50_s'])}, "
        f"p95 {ratio(flood['latency_p95_s'], calm['latency_p95_s'])}, "
        f"server CPU {flood['server_cpu_s'] / max(0.01, calm['server_cpu_s']):.2f}x"
    )


def ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}x" if a is not None and b else "-"


if __name__ == "__main__":
    raise SystemExit(main())
