"""Issue 35 (red-team round 4): who may take what on a server, and names that look alike.

- Bug 10: a name with an invisible character after it ("Ana" + U+3164 Hangul filler, U+034F
  combining grapheme joiner, U+FE0F variation selector, U+115F/U+1160/U+FFA0, U+2800 blank
  braille) joined a room as a second "Ana".
- Bug 12: with `--max-connections 30`, one address's idle sockets took the whole budget of
  connections not yet authenticated: everyone else was reset at the accept.
- Concerns: on an open server one address took every viewer slot and every stream slot, a
  client that reconnects could push its 5 s burst again on every connection, and ping frames
  were not counted by `--max-frame-rate`.

A real server on loopback with a stand-in stream (no model); each client address is a loopback
address of its own (127.0.0.2, ...), as other machines would be. Each test failed before its fix.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from serverkit import SR, START, FakeWorker, fake_factory
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from streamcap.server.client import ws_url
from streamcap.server.client_text import parse_speaker
from streamcap.server.close import ProtocolError
from streamcap.server.config import ServerConfig
from streamcap.server.thread import ServerThread


def start(**fields: Any) -> str:
    return json.dumps({**START, **fields})


def from_address(address: str) -> dict[str, Any]:
    """`connect` keyword arguments that bind the client's side to `address`."""
    return {"source_address": (address, 0)}


def ingest_from(
    srv: ServerThread, address: str, stream: str, token: str | None = None, **params: Any
) -> ClientConnection:
    url = ws_url(srv.url("", websocket=True), "ingest", stream, token=token, **params)
    return connect(url, open_timeout=10, **from_address(address))


def viewer_from(srv: ServerThread, address: str, stream: str, token: str | None = None) -> Any:
    url = ws_url(srv.url("", websocket=True), "captions", stream, token=token)
    return connect(url, open_timeout=10, **from_address(address))


def outcome(ws: ClientConnection, wait: float = 10.0) -> tuple[str, int | None, str]:
    """("ready", None, "") once the server says ready, ("open", ...) if it says nothing within
    `wait`, or ("closed", code, reason) when it closes (the error frame's reason if it sent one)."""
    reason = ""
    try:
        while True:
            msg = ws.recv(timeout=wait)
            if isinstance(msg, str):
                body = json.loads(msg)
                if body.get("type") == "ready":
                    return "ready", None, ""
                if body.get("type") == "error":
                    reason = str(body.get("reason", ""))
    except TimeoutError:
        return "open", None, ""
    except ConnectionClosed as e:
        code = e.rcvd.code if e.rcvd is not None else None
        return "closed", code, reason or (e.rcvd.reason if e.rcvd is not None else "")


@pytest.fixture(scope="module")
def open_srv() -> Iterator[ServerThread]:
    """No tokens (the open server the concerns are about), admission off (only the limits).
    The shares are given: a server bound to loopback has none by default (every client is
    this machine's), one that listens beyond it has half (`test_shares_...` below)."""
    config = ServerConfig(
        port=0, admission=False, max_streams=4, max_viewers=8,
        max_streams_per_address=2, max_viewers_per_address=4,
    )  # fmt: skip
    with ServerThread(config, FakeWorker(), stream_factory=fake_factory) as s:
        yield s


# --------------------------------------------------------------------------- bug 10: names

INVISIBLE_TWINS = {
    "hangul-filler-3164": "Ana\u3164",
    "cgj-034f": "Ana\u034f",
    "vs16-fe0f": "Ana\ufe0f",
    "choseong-filler-115f": "Ana\u115f",
    "jungseong-filler-1160": "Ana\u1160",
    "halfwidth-filler-ffa0": "Ana\uffa0",
    "khmer-17b4": "Ana\u17b4",
    "braille-blank-2800": "Ana\u2800",
}


@pytest.mark.parametrize("twin", list(INVISIBLE_TWINS.values()), ids=list(INVISIBLE_TWINS))
def test_an_invisible_look_alike_does_not_join_as_a_second_name(
    open_srv: ServerThread, twin: str
) -> None:
    """Was: `ready` as a new name that displays as "Ana" (NAME-HANGULFILL, NAME-CGJ, NAME-VS16)."""
    room = "names-" + format(ord(twin[-1]), "x")
    with ingest_from(open_srv, "127.0.0.1", room, speaker="Ana") as first:
        first.send(start())
        assert outcome(first)[0] == "ready"
        with ingest_from(open_srv, "127.0.0.2", room) as second:
            second.send(start(speaker=twin))
            got = outcome(second)
        assert got[0] == "closed" and got[1] in (1003, 1008), got


@pytest.mark.parametrize("blank", ["\u2800", "\u3164", "\u115f\u1160", "\ufe0f", "\u034f"])
def test_a_name_that_shows_nothing_is_refused(blank: str) -> None:
    with pytest.raises(ProtocolError) as info:
        parse_speaker(blank)
    assert info.value.code == 1003


def test_emoji_names_keep_working_and_compare_without_their_variation_selector() -> None:
    assert parse_speaker("Ana \u2764\ufe0f") == parse_speaker("Ana \u2764") == "Ana \u2764"
    assert parse_speaker("Zo\u00eb") == "Zo\u00eb"
    namaste = "\u0928\u092e\u0938\u094d\u0924\u0947"  # a virama (Mn) that is not ignorable
    assert parse_speaker(namaste) == namaste


# --------------------------------------------------------------------------- bug 12: the budget


def test_config_keeps_one_address_to_a_fraction_of_the_pending_budget() -> None:
    assert ServerConfig(max_connections=30).pending_per_address == 3  # 15 pending in all / 4
    assert ServerConfig().pending_per_address == 16  # the default budget: the flag's value
    assert ServerConfig(max_connections=2).pending_per_address == 1


def _healthz_from(address: str, port: int) -> tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5, source_address=(address, 0))
    try:
        conn.request("GET", "/healthz")
        resp = conn.getresponse()
        return resp.status, resp.read().decode()
    finally:
        conn.close()


def test_idle_sockets_of_one_address_do_not_lock_others_out_with_30_connections() -> None:
    """Was (CONNCAP-30): 40 idle sockets from 127.0.0.1, then /healthz from 127.0.0.2 and a
    publisher from 127.0.0.3 were both reset at the accept."""
    config = ServerConfig(port=0, max_connections=30, admission=False)
    with ServerThread(config, FakeWorker(), stream_factory=fake_factory) as srv:
        idle: list[socket.socket] = []
        try:
            for _ in range(40):
                s = socket.socket()
                s.bind(("127.0.0.1", 0))
                s.connect(("127.0.0.1", srv.port))
                idle.append(s)
            time.sleep(0.3)  # the server has accepted (or dropped) them all
            try:
                status = _healthz_from("127.0.0.2", srv.port)
            except OSError as e:
                status = (0, repr(e))
            assert status[0] == 200, status
            try:
                with ingest_from(srv, "127.0.0.3", "after-idle") as pub:
                    pub.send(start())
                    got = outcome(pub)
            except OSError as e:
                got = ("connect failed", None, repr(e))
            assert got[0] == "ready", got
        finally:
            for s in idle:
                s.close()


# --------------------------------------------------------------------------- fair shares


def test_shares_default_to_half_on_an_open_side_of_a_server_that_listens_beyond() -> None:
    wide = ServerConfig(host="0.0.0.0")
    assert (wide.viewers_per_address, wide.streams_per_address) == (128, 4)
    tokens = ServerConfig(host="0.0.0.0", publish_token="p", view_token="v")
    assert (tokens.viewers_per_address, tokens.streams_per_address) == (None, None)
    local = ServerConfig()  # every client of a loopback server is this machine's
    assert (local.viewers_per_address, local.streams_per_address) == (None, None)
    assert ServerConfig(max_viewers_per_address=3).viewers_per_address == 3


def test_one_address_cannot_take_every_viewer_slot_of_an_open_server(
    open_srv: ServerThread,
) -> None:
    """Was (VIEWER-SLOTS): one address held all the viewers; the next address got
    `1008 server is at its limit of ... viewers`."""
    with contextlib.ExitStack() as held:
        refused, mine = None, 0
        for _ in range(8):  # --max-viewers 8
            got = outcome(held.enter_context(viewer_from(open_srv, "127.0.0.1", "watched")), 0.5)
            if got[0] == "closed":
                refused = got
                break
            mine += 1
        assert refused is not None and refused[1] == 1008, (mine, refused)
        assert "address" in refused[2], refused
        other = held.enter_context(viewer_from(open_srv, "127.0.0.2", "watched"))
        assert outcome(other, wait=1.0)[0] == "open"  # a viewer waiting for its stream


def test_viewers_with_the_view_token_are_not_limited_per_address() -> None:
    config = ServerConfig(port=0, view_token="v", max_viewers=6)
    with (
        ServerThread(config, FakeWorker(), stream_factory=fake_factory) as srv,
        contextlib.ExitStack() as held,
    ):
        mine = [held.enter_context(viewer_from(srv, "127.0.0.1", "w", "v")) for _ in range(6)]
        assert [outcome(ws, wait=0.3)[0] for ws in mine] == ["open"] * 6


def test_one_address_cannot_take_every_stream_slot_of_an_open_server(
    open_srv: ServerThread,
) -> None:
    """Was (ISO-RECONNECT, admission off): one address's publishers held every stream slot;
    another address got `1008 server is at its limit of ... streams`."""
    with contextlib.ExitStack() as held:
        results = []
        for k in range(3):  # --max-streams 4
            ws = held.enter_context(ingest_from(open_srv, "127.0.0.1", f"slot{k}"))
            with contextlib.suppress(ConnectionClosed):  # a refusal certain at connect
                ws.send(start())
            results.append(outcome(ws, wait=5))
        assert [r[0] for r in results] == ["ready", "ready", "closed"], results
        assert results[2][1] == 1008 and "address" in results[2][2], results
        other = held.enter_context(ingest_from(open_srv, "127.0.0.2", "slot-other"))
        other.send(start())
        assert outcome(other)[0] == "ready"


def _push_burst(srv: ServerThread, address: str, stream: str, seconds: float) -> tuple[Any, ...]:
    """Connect, start, send `seconds` of audio at once (within `--burst`), and see what the
    server says within a moment; the connection is then reset (the loop's reconnect)."""
    with ingest_from(srv, address, stream) as ws:
        ws.send(start())
        if outcome(ws)[0] != "ready":
            return ("not ready",)
        frame = np.zeros(SR // 2, np.int16).tobytes()  # 0.5 s
        with contextlib.suppress(ConnectionClosed):
            for _ in range(int(seconds / 0.5)):
                ws.send(frame)
            ws.send(json.dumps({"type": "stop"}))
        return outcome(ws, wait=5)


def test_a_client_that_reconnects_cannot_run_ahead_of_real_time_across_connections() -> None:
    """Was (ISO-RECONNECT): each connection may run `--burst` (5 s) ahead of real time, and a
    client that resets and reconnects got a fresh 5 s every time: 20 connections pushed 100 s
    of audio in a few seconds. Now an address's publishers share one real-time budget."""
    config = ServerConfig(port=0, admission=False, max_streams=2, max_streams_per_address=1)
    with ServerThread(config, FakeWorker(), stream_factory=fake_factory) as srv:
        results = [_push_burst(srv, "127.0.0.1", "loop", 4.0) for _ in range(6)]
        closes = [r[1] for r in results if r[0] == "closed"]
        flood = [r for r in results if r[0] == "closed" and r[1] == 1008 and "real time" in r[2]]
        assert flood, results
        assert closes[0] == 1000, results  # the first push is within its burst: stopped normally
        # another address has its own budget
        assert _push_burst(srv, "127.0.0.2", "other", 4.0)[:2] == ("closed", 1000)


def test_a_ping_flood_is_counted_like_a_message_flood(open_srv: ServerThread) -> None:
    """Was (FR-PINGFLOOD): 20 000 pings in 0.3 s, no close; `--max-frame-rate` counted only
    data messages."""
    with ingest_from(open_srv, "127.0.0.3", "pings") as ws:
        ws.send(start())
        assert outcome(ws)[0] == "ready"
        sent = 0
        with contextlib.suppress(ConnectionClosed):
            for i in range(3000):
                ws.ping(str(i))
                sent += 1
        got = outcome(ws, wait=5)
    assert got[0] == "closed" and got[1] == 1008, (sent, got)
    assert "too many messages" in got[2], got
