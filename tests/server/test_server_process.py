"""`streamcap serve` as a process, the way an operator runs it: SIGTERM mid-utterance, a killed
server restarted on the same `--record DIR`, running out of file descriptors, start-up lines.

Real model, real speech, real sockets on 127.0.0.1; each test starts its own process(es).
"""

from __future__ import annotations

import contextlib
import json
import resource
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from serverkit import SR, START, Collector, ServeProcess, http_get, padded, recall
from websockets.sync.client import connect

from streamcap.audio.pcm import float_to_pcm
from streamcap.server.client import publish, ws_url

pytestmark = pytest.mark.model


@pytest.fixture
def serve() -> Iterator[Any]:
    started: list[ServeProcess] = []

    def start(*args: str) -> ServeProcess:
        p = ServeProcess(*args)
        started.append(p)
        return p

    yield start
    for p in started:
        if p.proc.poll() is None:
            p.proc.kill()
            p.proc.wait(30)


def send_live(ws: Any, audio: np.ndarray) -> None:
    ws.send(json.dumps(START))
    assert json.loads(ws.recv(timeout=10))["type"] == "ready"
    t0 = time.monotonic()
    for k, i in enumerate(range(0, len(audio), SR // 10)):
        time.sleep(max(0.0, t0 + k * 0.1 - time.monotonic()))
        ws.send(float_to_pcm(audio[i : i + SR // 10]))


def publish_all(base: str, stream: str, audio: np.ndarray) -> None:
    import asyncio

    asyncio.run(publish(ws_url(base, "ingest", stream), audio, SR))


def test_sigterm_mid_utterance_delivers_the_final_then_closes_viewers(
    serve: Any, speech: dict, tmp_path: Path
) -> None:
    srv = serve("--record", str(tmp_path), "--view-token", "v-tok")
    # The start-up lines give the overlay URL, its token hidden: stderr is not a terminal here
    # (under systemd or docker it is the log: red-team round 4), `--show-tokens` shows it.
    assert f"{srv.url}/overlay?stream=main&token=<hidden>" in srv.text()
    assert "v-tok" not in srv.text()
    viewer = Collector(srv.ws, "meeting", token="v-tok")
    with connect(ws_url(srv.ws, "ingest", "meeting")) as pub:
        send_live(pub, speech["en_real_librivox_0870"][: 4 * SR])  # stops mid-sentence
        assert viewer.wait_for(lambda v: any(e["type"] == "partial" for e in v.events), 20)
        finals_before = len(viewer.finals())
        assert srv.stop(signal.SIGTERM) == 0
    assert viewer.ended.wait(30)
    assert viewer.close is not None and viewer.close[0] == 1001, viewer.close
    assert len(viewer.finals()) > finals_before, viewer.events
    assert recall(viewer.text(), "and mister john dashwood had then leisure") > 0.7
    recorded = (tmp_path / "meeting.jsonl").read_text().splitlines()
    assert [json.loads(x)["seq"] for x in recorded] == [e["seq"] for e in viewer.finals()]
    assert "stream meeting started" in srv.text() and "stream meeting stopped" in srv.text()


def test_a_killed_server_restarted_on_its_record_dir_resumes_viewers(
    serve: Any, speech: dict, tmp_path: Path
) -> None:
    srv = serve("--record", str(tmp_path))
    viewer = Collector(srv.ws, "talk", token=None)
    publish_all(srv.ws, "talk", padded(speech["en_real_praatio_mary"]))
    assert viewer.wait_for(lambda v: v.finals(), 30)
    seen = viewer.events[-1]
    viewer.stop()
    with connect(ws_url(srv.ws, "ingest", "talk")) as pub:  # killed while this one talks
        send_live(pub, padded(speech["en_real_librivox_0880"], after=0.3))
        time.sleep(1.5)
        srv.stop(signal.SIGKILL)
    srv2 = serve("--record", str(tmp_path))
    status, _, srt = http_get(f"{srv2.url}/streams/talk.srt")
    assert status == 200 and "barrel" in srt.lower(), srt
    back = Collector(srv2.ws, "talk", since=seen["seq"], epoch=seen["epoch"], token=None)
    publish_all(srv2.ws, "talk", padded(speech["en_real_goforward"]))
    assert back.wait_for(lambda v: recall(v.text(), "go forward ten meters") > 0.7, 30)
    back.stop()
    seqs = [e["seq"] for e in back.events]
    assert seqs == sorted(set(seqs)) and seqs[0] > seen["seq"], seqs  # nothing twice
    assert {e["epoch"] for e in back.events} == {seen["epoch"]}
    assert "barrel" not in back.text().lower()  # seen before the restart: not sent again
    recorded = [json.loads(x) for x in (tmp_path / "talk.jsonl").read_text().splitlines()]
    rec_seqs = [e["seq"] for e in recorded]
    assert rec_seqs == sorted(set(rec_seqs)), rec_seqs  # the JSONL repeats no seq
    assert [e["start"] for e in recorded] == sorted(e["start"] for e in recorded)
    srv2.stop()


def test_running_out_of_file_descriptors_is_logged_once(serve: Any) -> None:
    srv = serve("--max-connections", "100000")
    pid = srv.proc.pid
    open_fds = len(list(Path(f"/proc/{pid}/fd").iterdir()))
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]  # the child's, inherited
    hard_s = "unlimited" if hard == resource.RLIM_INFINITY else str(hard)
    subprocess.run(["prlimit", f"--pid={pid}", f"--nofile={open_fds + 8}:{hard_s}"], check=True)
    socks = []
    try:
        for _ in range(40):
            with contextlib.suppress(OSError):
                socks.append(socket.create_connection(("127.0.0.1", srv.port), timeout=2))
        time.sleep(3.5)  # asyncio retries accept() every second
    finally:
        for s in socks:
            s.close()
    subprocess.run(["prlimit", f"--pid={pid}", f"--nofile=4096:{hard_s}"], check=True)
    deadline = time.monotonic() + 15

    def healthy() -> bool:
        try:
            return http_get(f"{srv.url}/healthz")[0] == 200
        except OSError:  # the backlog of closed sockets still in the per-address budget
            return False

    while time.monotonic() < deadline and not healthy():
        time.sleep(0.2)
    assert http_get(f"{srv.url}/healthz")[0] == 200  # recovered
    assert srv.stop() == 0
    text = srv.text()
    assert text.count("out of file descriptors") == 1, text
    assert "Traceback" not in text, text
