"""`streamcap serve` as a subprocess on a free loopback port, its log collected line by line.

For the harness's real-server checks (scripts/flood_test.py, scripts/head_loss_check.py): the
server under test runs as a user runs it, in a process of its own. `scripts/load_test.py`
starts its own (`load_server.serving`: another checkout, a log file, Ray's replicas).
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading


class ServeProcess:
    """`streamcap serve --port 0 ARGS`, ready once its start-up lines are out; `url` is its
    http://HOST:PORT, `lines` its stderr so far."""

    def __init__(self, *args: str, ready_timeout: float = 120) -> None:
        cmd = [sys.executable, "-m", "streamcap.cli", "serve", "--port", "0", *args]
        self.proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        self.url = ""
        ready = threading.Event()

        def read() -> None:
            assert self.proc.stderr is not None
            for line in self.proc.stderr:
                self.lines.append(line.rstrip("\n"))
                m = re.search(r"serving on (http://\S+)/", line)
                if m:
                    self.url = m.group(1)
                if line.lstrip().startswith("metrics "):  # the last start-up line
                    ready.set()
            ready.set()

        self._reader = threading.Thread(target=read, daemon=True)
        self._reader.start()
        if not (ready.wait(ready_timeout) and self.url):
            self.proc.kill()
            raise RuntimeError("streamcap serve did not start:\n" + "\n".join(self.lines))

    @property
    def ws(self) -> str:
        """The WebSocket base URL (ws://HOST:PORT)."""
        return self.url.replace("http://", "ws://")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60) -> int:
        """Signal the server (SIGTERM: a clean stop) and wait: its exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        rc = self.proc.wait(timeout)
        self._reader.join(10)
        return rc
