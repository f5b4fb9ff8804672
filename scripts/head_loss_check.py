#!/usr/bin/env python3
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
import signal
import sys
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np
import soundfile as sf

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

from serverkit import SR, Collector, ServeProcess, padded  # noqa: E402

from streamcap.cluster.local_head import start_head  # noqa: E402
from streamcap.server.client import publish, ws_url  # noqa: E402


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

    clips = [
        sf.read(ROOT / "tests" / "data" / f"{n}.wav", dtype="float32")[0]
        for n in ("en_real_jfk", "en_real_librivox_0870", "en_real_praatio_mary", "en_real_jfk")
    ]
    gap = np.zeros(int(1.5 * SR), np.float32)
    audio = padded(np.concatenate([x for c in clips for x in (c, gap)]))
    viewer = Collector(gateway.ws, "headloss", token=None)
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
            if now.startswith("ok") and not thread.is_alive():
                break
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
