"""What a reconnecting publisher needs from the server (issue 39, `streamcap publish`): the
``ready`` message's ``time`` (where this connection's audio begins on the stream's clock) and
``epoch``; and the publisher client itself against a real server on loopback. No model: the
server's streams are `serverkit.FakeStream`s (a final per frame)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator

import numpy as np
import pytest
from serverkit import SR, START, FakeWorker, base, fake_factory, ingest

from streamcap.audio.capture import CaptureBuffer
from streamcap.core.resume import ResumeBuffer
from streamcap.server.config import ServerConfig
from streamcap.server.publish_client import Publisher, PublishRefused, PublishTarget
from streamcap.server.thread import ServerThread

TOKEN = "p-secret"


@pytest.fixture
def srv() -> Iterator[ServerThread]:
    config = ServerConfig(port=0, publish_token=TOKEN)
    with ServerThread(config, FakeWorker(), stream_factory=fake_factory) as s:
        yield s


def ready(ws: object) -> dict[str, object]:
    msg = json.loads(ws.recv(timeout=10))  # type: ignore[attr-defined]
    assert msg["type"] == "ready", msg
    return msg  # type: ignore[no-any-return]


def test_ready_says_where_the_connections_audio_begins(srv: ServerThread) -> None:
    with ingest(srv, "talk", token=TOKEN) as ws:
        ws.send(json.dumps(START))
        first = ready(ws)
        for _ in range(20):  # 2 s of audio, then the connection drops (no stop)
            ws.send(b"\0\0" * (SR // 10))
    assert first["time"] == 0.0 and first["epoch"]
    deadline = time.monotonic() + 10
    while True:  # the dropped connection's audio is finalised, then the stream goes on
        with ingest(srv, "talk", token=TOKEN) as ws:
            ws.send(json.dumps(START))
            again = ready(ws)
            ws.send(json.dumps({"type": "stop"}))
        if again["time"] or time.monotonic() > deadline:
            break
    assert again["time"] == pytest.approx(2.0) and again["epoch"] == first["epoch"]


def _publish(srv: ServerThread, token: str, seconds: float) -> tuple[Publisher, list[str]]:
    audio = CaptureBuffer(ResumeBuffer(capacity_s=10))
    chunk = (0.1 * np.sin(np.arange(SR // 10) / 5)).astype(np.float32)

    def source() -> None:  # a live source: 100 ms chunks at real time
        for _ in range(round(seconds * 10)):
            audio.put(chunk, live=True)
            time.sleep(0.1)
        audio.end()

    lines: list[str] = []
    target = PublishTarget(base(srv), "pub", token, {"speaker": "Ana"})
    publisher = Publisher(target, audio, on_event=lines.append)
    threading.Thread(target=source, daemon=True).start()
    asyncio.run(asyncio.wait_for(publisher.run(), 30))
    return publisher, lines


def test_the_publisher_client_sends_all_and_waits_for_the_last_final(srv: ServerThread) -> None:
    publisher, lines = _publish(srv, TOKEN, 1.5)
    assert lines[0] == "connected" and lines[-1] == "stopped: every caption is out", lines
    status = publisher.refresh()
    assert status.sent_s == pytest.approx(1.5) and status.behind_s == 0 and not status.lost_s
    entry = srv.server.hub.get("pub")
    assert entry is not None and entry.log.last_seq >= 15  # a final per frame, numbered


def test_a_wrong_token_stops_the_publisher_at_once(srv: ServerThread) -> None:
    with pytest.raises(PublishRefused, match="wrong publish token"):
        _publish(srv, "not-it", 0.3)
