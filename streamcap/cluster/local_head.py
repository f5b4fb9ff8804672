"""A one-node Ray cluster on loopback: for trying the Ray backend on one machine, for the tests
and for the load test (docs/scaling.md).

It is ``ray start --head --block`` bound to 127.0.0.1 with free ports, no dashboard and a temp
folder of its own, in its own process group. It is stopped through that group, never with
``ray stop``, which would end every Ray process on the machine, other people's included. No
Ray import: the head is a subprocess.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = ["LocalHead", "start_head"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class LocalHead:
    """A running head: its GCS ``address`` ("127.0.0.1:PORT")."""

    port: int
    temp_dir: str
    process: subprocess.Popen[bytes]
    num_cpus: int

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log(self) -> Path:
        return Path(self.temp_dir + ".log")

    def processes(self) -> list[int]:
        """Pids whose command line names this head's temp folder (its raylet, workers, ...)."""
        pids = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                with contextlib.suppress(OSError):
                    if self.temp_dir.encode() in (entry / "cmdline").read_bytes():
                        pids.append(int(entry.name))
        return pids

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Signal the head's whole process group (SIGKILL: the head is lost, as in a crash)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(30)

    def restart(self, ready_timeout: float = 120) -> None:
        """Start the head again on the same port and folder (after `kill`)."""
        since = self.log.stat().st_size
        self.process = _launch(self.port, self.temp_dir, self.num_cpus)
        _wait_ready(self, ready_timeout, since)

    def stop(self) -> list[int]:
        """SIGTERM the group, SIGKILL what is left; returns the pids that outlived SIGTERM."""
        self.kill(signal.SIGTERM)
        if self.process.poll() is None:
            self.kill(signal.SIGKILL)
        time.sleep(1)
        left = self.processes()
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(self.temp_dir, ignore_errors=True)
        with contextlib.suppress(OSError):
            self.log.unlink()
        return left


def _launch(port: int, temp_dir: str, num_cpus: int) -> subprocess.Popen[bytes]:
    ray = str(Path(sys.executable).with_name("ray"))
    cmd = [
        ray, "start", "--head", "--block", "--node-ip-address=127.0.0.1", f"--port={port}",
        f"--num-cpus={num_cpus}", "--num-gpus=0", "--include-dashboard=false",
        "--disable-usage-stats", f"--temp-dir={temp_dir}", "--object-store-memory=300000000",
        f"--ray-client-server-port={free_port()}", f"--dashboard-agent-listen-port={free_port()}",
    ]  # fmt: skip
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0")
    with open(temp_dir + ".log", "a") as log:
        return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)  # fmt: skip


def _wait_ready(head: LocalHead, timeout: float, since: int = 0) -> None:
    """Until the log says the head runs (only what it wrote after byte ``since``)."""
    deadline = time.monotonic() + timeout
    while "Ray runtime started" not in head.log.read_bytes()[since:].decode(errors="replace"):
        if head.process.poll() is not None or time.monotonic() > deadline:
            text = head.log.read_text(errors="replace")
            head.stop()
            raise RuntimeError(f"the local Ray head did not start:\n{text[-3000:]}")
        time.sleep(0.3)


def start_head(num_cpus: int = 2, ready_timeout: float = 120) -> LocalHead:
    """Start a head and wait until it runs."""
    temp_dir = tempfile.mkdtemp(prefix="scray-", dir="/tmp")  # short: the raylet's sockets
    port = free_port()
    head = LocalHead(port, temp_dir, _launch(port, temp_dir, num_cpus), num_cpus)
    _wait_ready(head, ready_timeout)
    return head


@contextlib.contextmanager
def local_head(num_cpus: int = 2) -> Iterator[LocalHead]:
    """A head for the ``with`` block, stopped after it."""
    head = start_head(num_cpus)
    try:
        yield head
    finally:
        head.stop()
