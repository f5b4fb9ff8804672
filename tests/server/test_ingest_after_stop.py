"""A publisher that sends audio after its stop (the mic page's worklet kept sending silence)
while its last finals still decode: the server reads and drops those frames, so its pings are
still answered and the close is 1000 "stopped", not 1011 "keepalive ping timeout" (found in
the cross-talk trial of issue 37, when finals took longer than the ping timeout)."""

from __future__ import annotations

import json

from serverkit import START, FakeWorker, fake_factory, ingest
from websockets.exceptions import ConnectionClosed

from streamcap.server.config import ServerConfig
from streamcap.server.thread import ServerThread

FRAME = b"\0\0" * 1600  # 0.1 s of silence


def test_frames_after_the_stop_are_read_while_the_finals_decode() -> None:
    config = ServerConfig(
        port=0, ping_interval_s=0.2, ping_timeout_s=0.6, burst_s=None, max_frame_rate=None
    )
    with (
        ServerThread(config, FakeWorker(), stream_factory=fake_factory) as srv,
        ingest(srv, "late", token=None, ping_interval=None) as ws,
    ):
        ws.send(json.dumps({**START, "prompt": "slow-finish"}))
        assert json.loads(ws.recv(timeout=10))["type"] == "ready"
        ws.send(FRAME)
        ws.send(json.dumps({"type": "stop"}))
        for _ in range(300):  # the page's silent frames after its stop (3 s finish)
            try:
                ws.send(FRAME)
            except ConnectionClosed:
                break
        try:
            while True:
                ws.recv(timeout=15)
        except ConnectionClosed as e:
            assert e.rcvd is not None
            assert (e.rcvd.code, e.rcvd.reason) == (1000, "stopped"), e.rcvd
