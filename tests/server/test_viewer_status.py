"""Issue 37, item 7: a viewer can be told whether anyone publishes on its stream.

An overlay opened on a stream nobody publishes on stayed blank and said nothing (a copied
`?stream=ID` link, a mic page on another stream id). A viewer that asks with `status=1` gets a
`status` message (`{"type": "status", "stream": ..., "publishing": ...}`) when it connects and
whenever that changes: when a publisher starts, and when the room's last one leaves. Viewers
that do not ask get captions only, as before. A real server on loopback with a stand-in
stream (no model: what is under test is the server's viewer side).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from serverkit import SR, START, Collector, FakeWorker, fake_factory, ingest

from streamcap.server.config import ServerConfig
from streamcap.server.thread import ServerThread
from streamcap.server.viewers import status_json

FRAME = bytes(2 * SR // 10)  # 0.1 s of silence: the stand-in stream makes one final of it


@pytest.fixture
def srv() -> Iterator[ServerThread]:
    config = ServerConfig(port=0, admission=False)
    with ServerThread(config, FakeWorker(), stream_factory=fake_factory) as s:
        yield s


def statuses(c: Collector) -> list[bool]:
    return [e["publishing"] for e in c.events if e["type"] == "status"]


def kinds(c: Collector) -> list[str]:
    return [e["type"] for e in c.events]


def test_status_on_connect_and_when_publishing_starts_and_stops(srv: ServerThread) -> None:
    watcher = Collector(srv, "show", token=None, status=1)
    plain = Collector(srv, "show", token=None)  # did not ask: captions only
    assert watcher.wait_for(lambda c: statuses(c) == [False], 10), watcher.events
    assert watcher.events[0] == {"type": "status", "stream": "show", "publishing": False}
    with ingest(srv, "show", token=None) as ws:
        ws.send(json.dumps(START))
        assert json.loads(ws.recv(timeout=10))["type"] == "ready"
        # told at the start, before any caption: someone publishes (speech may come later)
        assert watcher.wait_for(lambda c: statuses(c) == [False, True], 10), watcher.events
        ws.send(FRAME)
        assert watcher.wait_for(lambda c: "final" in kinds(c), 10), watcher.events
        ws.send(json.dumps({"type": "stop"}))
        for _ in ws:  # the server closes once every final is out
            pass
    assert watcher.wait_for(lambda c: statuses(c) == [False, True, False], 10), watcher.events
    # a status message is no caption: no seq, never counted as one
    assert all("seq" not in e for e in watcher.events if e["type"] == "status")
    assert plain.wait_for(lambda c: "final" in kinds(c), 10)
    assert "status" not in kinds(plain), plain.events
    # a viewer who comes later: the replay first, then whether anyone publishes now
    late = Collector(srv, "show", token=None, status=1)
    assert late.wait_for(lambda c: "status" in kinds(c), 10), late.events
    assert kinds(late) == ["final", "status"] and statuses(late) == [False]
    for c in (watcher, plain, late):
        c.stop()


def test_a_room_publishes_until_its_last_publisher_leaves(srv: ServerThread) -> None:
    watcher = Collector(srv, "room", token=None, status=1)
    assert watcher.wait_for(lambda c: statuses(c) == [False], 10)

    def begin(ws: Any) -> None:
        ws.send(json.dumps(START))
        assert json.loads(ws.recv(timeout=10))["type"] == "ready"

    def leave(ws: Any) -> None:
        ws.send(json.dumps({"type": "stop"}))
        for _ in ws:
            pass

    with (
        ingest(srv, "room", token=None, speaker="Ana") as ana,
        ingest(srv, "room", token=None, speaker="Ben") as ben,
    ):
        begin(ana)
        assert watcher.wait_for(lambda c: statuses(c) == [False, True], 10)
        begin(ben)
        ana_left = len(watcher.events)
        leave(ana)
        ben.send(FRAME)  # Ben still talks: his caption comes, and no change of state
        assert watcher.wait_for(
            lambda c: any(e.get("speaker") == "Ben" for e in c.events[ana_left:]), 10
        )
        assert statuses(watcher) == [False, True], watcher.events
        leave(ben)
    assert watcher.wait_for(lambda c: statuses(c) == [False, True, False], 10), watcher.events
    watcher.stop()


def test_a_viewer_of_a_live_stream_is_told_at_once(srv: ServerThread) -> None:
    with ingest(srv, "live", token=None) as ws:
        ws.send(json.dumps(START))
        assert json.loads(ws.recv(timeout=10))["type"] == "ready"
        watcher = Collector(srv, "live", token=None, status=1)
        assert watcher.wait_for(lambda c: statuses(c) == [True], 10), watcher.events
        watcher.stop()


def test_status_json() -> None:
    assert json.loads(status_json("a.b", True)) == {
        "type": "status",
        "stream": "a.b",
        "publishing": True,
    }
