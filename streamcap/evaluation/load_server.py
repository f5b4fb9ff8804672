"""The server under test of scripts/load_test.py: started as a subprocess, and watched.

Apart from the load test's clients (`load_clients`): `serving` runs `streamcap serve` (of
``--server-root``, on a free loopback port, recording into a temporary folder) for the length of
a run; `ProcStats` and `MachineCpu` read the server's and the machine's CPU from /proc, `scrape`
and `cluster_report` its /metrics, `Sampler` all of them every few seconds. Linux only (/proc).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ProcStats:
    """CPU% (of one core) and RSS of a process from /proc, sampled on demand."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.tick = os.sysconf("SC_CLK_TCK")
        self.last: tuple[float, float] | None = None

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / self.tick  # utime + stime

    def rss_mb(self) -> float:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def sample(self) -> tuple[float, float]:
        now, cpu = time.monotonic(), self.cpu_seconds()
        pct_ = 0.0
        if self.last is not None:
            pct_ = 100 * (cpu - self.last[1]) / max(1e-6, now - self.last[0])
        self.last = (now, cpu)
        return pct_, self.rss_mb()


class MachineCpu:
    """Busy share of all cores (from /proc/stat): how much else ran besides the server."""

    def __init__(self) -> None:
        self.last = self._read()

    @staticmethod
    def _read() -> tuple[int, int]:
        v = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        idle = v[3] + v[4]
        return sum(v) - idle, sum(v)

    def sample(self) -> float:
        busy, total = self._read()
        b0, t0 = self.last
        self.last = (busy, total)
        return 100.0 * (busy - b0) / max(1, total - t0)


def scrape(url: str) -> dict[str, float]:
    out: dict[str, float] = {}
    with urllib.request.urlopen(url, timeout=5) as r:
        for line in r.read().decode().splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                out[name] = float(value)
    return out


def cluster_report(url: str, wall: float, bridge: ProcStats | None) -> dict[str, Any]:
    """The Ray backend's figures from the gateway's /metrics (nothing for a local server)."""
    text = urllib.request.urlopen(url, timeout=5).read().decode()
    if "streamcap_replicas_running" not in text:
        return {}
    series: list[tuple[str, dict[str, str], float]] = []
    for line in text.splitlines():
        m = re.match(r"(\w+)(?:\{(.*)\})? (\S+)$", line)
        if m and not line.startswith("#"):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
            series.append((m.group(1), labels, float(m.group(3))))

    def total(name: str, **want: str) -> float:
        return sum(v for n, lab, v in series if n == name and want.items() <= lab.items())

    replicas: dict[str, dict[str, Any]] = {}
    for name, lab, _ in series:
        if name == "streamcap_replica_info":
            r = lab["replica"]
            replicas[r] = {
                "pid": int(lab.get("pid", 0)),
                "node": lab.get("node"),
                "finals": total("streamcap_replica_decodes_total", replica=r, kind="final"),
                "partials": total("streamcap_replica_decodes_total", replica=r, kind="partial"),
                "busy_share": round(
                    total("streamcap_replica_compute_seconds_total", replica=r) / wall, 3
                ),
            }
    return {
        "replicas": replicas,
        "replicas_running_end": total("streamcap_replicas_running"),
        "finals_resent": total("streamcap_remote_retries_total", kind="final"),
        "partials_lost": total("streamcap_remote_retries_total", kind="partial"),
        "requests_lost": {
            lab["reason"]: v for n, lab, v in series if n == "streamcap_remote_lost_total"
        },
        "duplicate_replies_ignored": total("streamcap_remote_duplicates_ignored_total"),
        "transport_p95_s": total("streamcap_remote_transport_p95_seconds"),
        "bridge_cpu_pct_mean": round(bridge.sample()[0], 1) if bridge is not None else None,
    }


def bridge_pid(server_pid: int) -> int:
    """The gateway's Ray bridge (a child process), 0 if none."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                if (
                    int(stat[1]) == server_pid
                    and b"streamcap.cluster.bridge" in (entry / "cmdline").read_bytes()
                ):
                    return int(entry.name)
    return 0


def server_command(args: argparse.Namespace, backend: str, address: str, port: int,
                   record: Path) -> list[str]:  # fmt: skip
    """`streamcap serve` as the load test runs it: sized for its streams and viewers,
    recording into ``record``, on ``backend`` (Ray: the cluster at ``address``)."""
    cmd = [
        sys.executable, "-m", "streamcap.cli", "serve", "--model", args.model,
        "--port", str(port), "--record", str(record),
        "--max-streams", str(args.streams), "--max-viewers", str(args.streams * args.viewers),
    ]  # fmt: skip
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    if backend == "ray":
        cmd += ["--backend", "ray", "--ray-address", address,
                "--replica-threads", str(args.replica_threads)]  # fmt: skip
        if args.max_replicas:
            cmd += ["--min-replicas", str(args.replicas), "--max-replicas",
                    str(args.max_replicas)]  # fmt: skip
        else:
            cmd += ["--replicas", str(args.replicas)]
    return cmd + args.server_arg


def wait_ready(server: subprocess.Popen[Any], port: int, log_path: Path,
               replicas: int | None) -> None:  # fmt: skip
    """Until /healthz answers (and, with ``replicas``, says all of them run); exits when the
    server dies first or is not ready after 400 s."""
    deadline = time.monotonic() + 400
    while True:
        if server.poll() is not None:
            print(log_path.read_text(), file=sys.stderr)
            raise SystemExit("server exited before it was ready")
        with contextlib.suppress(OSError):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1)
            break
        if time.monotonic() > deadline:
            raise SystemExit("server not ready after 400 s")
        time.sleep(0.5)
    if replicas is not None:  # the gateway serves once one replica runs: wait for all
        want = f"ok (ray: {replicas}/{replicas} replicas)"
        while time.monotonic() < deadline:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz") as r:
                if r.read().decode().strip() == want:
                    break
            time.sleep(0.5)


@contextlib.contextmanager
def serving(args: argparse.Namespace, backend: str, address: str) -> Iterator[tuple[int, Path]]:
    """The server, ready, for the block: its port and its --record folder (``args`` gets its
    pid, its Ray bridge's and the backend); then SIGINT (killed after 90 s)."""
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="streamcap-load-") as tmp:
        record = Path(tmp)
        cmd = server_command(args, backend, address, port, record)
        env = dict(os.environ, PYTHONPATH=str(args.server_root))
        log_path = record / "server.log"
        log_file = open(log_path, "w")  # noqa: SIM115 - closed below
        server = subprocess.Popen(
            cmd, cwd=args.server_root, env=env, stderr=log_file, stdout=log_file
        )
        try:
            wait_ready(server, port, log_path, args.replicas if backend == "ray" else None)
            args._server_pid = server.pid
            args._bridge_pid = bridge_pid(server.pid)
            args._backend = backend
            yield port, record
        finally:
            server.send_signal(signal.SIGINT)
            try:
                server.wait(90)
            except subprocess.TimeoutExpired:
                server.kill()
            log_file.close()


class Sampler:
    """The server's CPU and RSS, the machine's busy share and the server's /metrics gauges,
    every ``every`` seconds (`run`) into `samples`; ``t_start``: the time of the first sample's
    baseline."""

    def __init__(self, pid: int, metrics_url: str, every: float) -> None:
        self.proc = ProcStats(pid)
        self.proc.sample()
        self.machine = MachineCpu()
        self.url = metrics_url
        self.every = every
        self.samples: list[dict[str, float]] = []
        self.t_start = time.monotonic()

    async def run(self) -> None:
        nan = float("nan")
        while True:
            await asyncio.sleep(self.every)
            cpu, rss = self.proc.sample()
            m = await asyncio.to_thread(scrape, self.url)
            self.samples.append(
                {
                    "t": round(time.monotonic() - self.t_start, 1),
                    "cpu_pct": round(cpu, 1),
                    "machine_busy_pct": round(self.machine.sample(), 1),
                    "rss_mb": round(rss, 1),
                    "queue_depth": m.get("streamcap_queue_depth", nan),
                    "replicas_running": m.get("streamcap_replicas_running", nan),
                    "viewers": m.get("streamcap_viewers", nan),
                    "heap_in_use_mb": m.get('streamcap_heap_bytes{kind="in_use"}', nan) / 1e6,
                    "heap_free_mb": m.get('streamcap_heap_bytes{kind="free"}', nan) / 1e6,
                    "finals_in_memory": m.get("streamcap_finals_in_memory", nan),
                }
            )
