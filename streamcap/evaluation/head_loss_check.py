"""Fault check (docs/scaling.md): the Ray head (GCS) dies under a running gateway, mid-stream,
and comes back 30 s later on the same port.

    python scripts/head_loss_check.py

Starts a one-node cluster on 127.0.0.1, `streamcap serve --backend ray --replicas 1`, publishes
real speech (tests/data) at real-time pace, SIGKILLs the head's process group, restarts it, and
prints /healthz every 3 s, the finals the viewer got, and the gateway's log. Expected: the
gateway stays up and says `degraded (ray: not connected; N finals waiting)`, deploys its replica
again once the head is back, and every final arrives once. Exit status 0 when it did.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
import time
import urllib.request
from collections.abc import Callable
from typing import Any

import numpy as np
import soundfile as sf

from streamcap.cluster.local_head import LocalHead, start_head
from streamcap.core.constants import SAMPLE_RATE
from streamcap.evaluation.paths import TEST_DATA
from streamcap.evaluation.serve_process import ServeProcess
from streamcap.server.client import publish, watch, ws_url

SR = SAMPLE_RATE
CLIPS = ("en_real_jfk", "en_real_librivox_0870", "en_real_praatio_mary", "en_real_jfk")


def speech() -> np.ndarray:
    """Four test clips 1.5 s apart, with 0.3 s of silence before and 1 s after."""
    gap = np.zeros(int(1.5 * SR), np.float32)
    clips = [sf.read(TEST_DATA / f"{n}.wav", dtype="float32")[0] for n in CLIPS]
    audio = np.concatenate([x for c in clips for x in (c, gap)])
    z = np.zeros
    return np.concatenate([z(int(0.3 * SR), np.float32), audio, z(int(1.0 * SR), np.float32)])


class FinalsViewer:
    """A viewer of one stream on its own thread, keeping the finals it receives."""

    def __init__(self, ws_base: str, stream: str) -> None:
        self.url = ws_url(ws_base, "captions", stream, since=0)
        self.events: list[dict[str, Any]] = []
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)
        self._thread.start()

    async def _run(self) -> None:
        with contextlib.suppress(Exception):  # the connection's end is the viewer's end
            async for ev in watch(self.url):
                self.events.append(ev)

    def finals(self) -> list[dict[str, Any]]:
        return [e for e in self.events if e["type"] == "final"]


def kill_and_restart(
    head: LocalHead, health: Callable[[], str], say: Callable[[str], None],
    publisher: threading.Thread,
) -> None:  # fmt: skip
    """SIGKILL the head 6 s into the stream, watch /healthz for 24 s, restart it, and watch
    until the gateway is ok again and the publisher is done (at most 120 s)."""
    time.sleep(6)
    say("SIGKILL to the head's process group")
    head.kill(signal.SIGKILL)
    for _ in range(8):
        time.sleep(3)
        say(f"healthz: {health()}")
    say("head restarted")
    head.restart()
    for _ in range(40):
        time.sleep(3)
        now = health()
        say(f"healthz: {now}")
        if now.startswith("ok") and not publisher.is_alive():
            break


def main() -> int:
    head = start_head(num_cpus=2)
    gateway = ServeProcess(
        "--backend", "ray", "--ray-address", head.address, "--replicas", "1",
        "--replica-threads", "1", "--no-admission", ready_timeout=300,
    )  # fmt: skip
    t0 = time.monotonic()

    def health() -> str:
        try:
            with urllib.request.urlopen(gateway.url + "/healthz", timeout=3) as r:
                return str(r.read().decode().strip())
        except OSError as e:
            return repr(e)

    def say(what: str) -> None:
        print(f"{time.monotonic() - t0:5.0f} s  {what}", flush=True)

    audio = speech()
    viewer = FinalsViewer(gateway.ws, "headloss")
    errors: list[str] = []

    def publisher() -> None:
        try:
            asyncio.run(publish(ws_url(gateway.ws, "ingest", "headloss"), audio, SR))
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))

    thread = threading.Thread(target=publisher)
    try:
        say(f"gateway ready: {health()}")
        thread.start()
        kill_and_restart(head, health, say, thread)
        thread.join(120)
        finals = [f["text"] for f in viewer.finals()]
        print("publisher errors:", errors)
        print(f"finals ({len(finals)}):", finals)
        print("gateway alive:", gateway.proc.poll() is None)
        print("\n".join(ln for ln in gateway.lines if "streamcap." in ln))
        segments = [f["segment"] for f in viewer.finals()]
        ok = not errors and len(finals) >= 6 and len(segments) == len(set(segments))
    finally:
        rc = gateway.stop(timeout=90)
        print("gateway exit status:", rc)
        head.stop()
    return 0 if ok and rc == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
