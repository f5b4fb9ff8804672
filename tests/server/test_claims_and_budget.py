"""Issue 21, items 6, 8 and 10: one claim rule for URL-named and start-named publishers (two
people joining at once never evict each other, a start-named publisher takes over its own
name), subtitle downloads served whole however long they take, and a budget of their own for
connections that have not authenticated (so idle sockets or start-less publishers from one
address cannot lock token holders out, and a socket that never starts holds no stream slot).

A real server on loopback with a stand-in stream (no model); strangers connect from another
loopback address (127.0.0.2), as a second machine would.
"""

from __future__ import annotations

import contextlib
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from serverkit import START, FakeWorker, expect_close, fake_factory, ingest
from websockets.sync.client import ClientConnection

from streamcap.core.captions import Caption
from streamcap.server.bucket import TokenBucket
from streamcap.server.budget import ConnectionBudget
from streamcap.server.config import ServerConfig
from streamcap.server.thread import ServerThread

STRANGER = "127.0.0.2"


def start(**fields: Any) -> str:
    return json.dumps({**START, **fields})


def ready(ws: ClientConnection) -> dict[str, Any]:
    msg = json.loads(ws.recv(timeout=10))
    assert msg["type"] == "ready", msg
    return dict(msg)


def still_open(ws: ClientConnection, wait: float = 0.5) -> bool:
    try:
        ws.recv(timeout=wait)
    except TimeoutError:
        return True
    except Exception:  # noqa: BLE001 - closed
        return False
    return True


def stranger_socket(port: int) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind((STRANGER, 0))
    s.connect(("127.0.0.1", port))
    return s


def dropped(s: socket.socket, wait: float) -> bool:
    """The server closed `s` (reset or EOF) within `wait` seconds."""
    s.settimeout(wait)
    try:
        return s.recv(1) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False


# --------------------------------------------------------------------------- the budget, pure


def test_the_budget_keeps_strangers_to_their_share() -> None:
    b = ConnectionBudget(limit=10, per_address=3)
    for _ in range(3):
        assert b.refusal("a") is None
        b.accept("a")
    assert "per address is 3" in str(b.refusal("a"))
    assert b.refusal("b") is None  # another address is not held up by a
    b.accept("b")
    b.accept("b")
    assert "not yet authenticated (the limit is 5)" in str(b.refusal("c"))  # half of 10
    b.authenticate("a")  # one of a's proved itself: out of the pending budget, still open
    assert b.pending_from("a") == 2 and b.open == 5
    assert b.refusal("a") is None
    for _ in range(5):
        b.accept(f"x{_}")
        b.authenticate(f"x{_}")
    assert b.open == 10 and "the limit is 10" in str(b.refusal("z"))
    b.close("x0", pending=False)
    b.close("a", pending=True)
    assert b.open == 8 and b.pending_from("a") == 1 and b.refusal("z") is None


def test_new_connections_from_one_address_are_paced() -> None:
    b = ConnectionBudget(limit=1000, per_address=1000, accept_rate=10.0, accept_burst=20.0)
    for _ in range(20):
        assert b.refusal("a", now=0.0) is None
    assert "more than 10 new connections a second from a" in str(b.refusal("a", now=0.0))
    assert b.refusal("b", now=0.0) is None  # its own pace
    assert b.refusal("a", now=0.1) is None  # one more after 0.1 s
    assert b.refusal("a", now=0.1) is not None


def test_the_token_bucket_spends_what_it_holds_and_refills_at_its_rate() -> None:
    b = TokenBucket(rate=2.0, burst=4.0)
    assert b.take(3.0, now=0.0) and not b.take(2.0, now=0.0)  # 1 left: 2 refused, none spent
    assert b.wait_s(2.0, now=0.0) == pytest.approx(0.5)
    assert b.take(2.0, now=0.5) and not b.full(now=0.5)
    assert b.full(now=10.0) and b.tokens == 4.0  # never over the burst
    assert b.wait_s(100.0, now=10.0) == 0.0  # more than the burst: waits for a full bucket only


# --------------------------------------------------------------------------- item 6: claims


@pytest.fixture
def token_srv() -> Iterator[ServerThread]:
    config = ServerConfig(port=0, publish_token="p")
    with ServerThread(config, FakeWorker(), stream_factory=fake_factory) as s:
        yield s


def test_a_start_named_publisher_takes_over_its_own_name(token_srv: ServerThread) -> None:
    """Was: refused 1008 `already publishing` (the start-named claim had no takeover)."""
    with ingest(token_srv, "room", token="p") as old:
        old.send(start(speaker="Ana"))
        ready(old)
        t0 = time.monotonic()
        with ingest(token_srv, "room", token="p") as new:
            new.send(start(speaker="Ana"))
            ready(new)
            assert time.monotonic() - t0 < 1.5  # ready within 1 s of the old one's end
            expect_close(old, 1001)
            assert still_open(new)


def test_two_people_joining_at_once_never_evict_each_other(token_srv: ServerThread) -> None:
    """Was: the first (unnamed in its URL, its start not yet in) was closed 1001 `replaced by
    a new connection` when a second one connected and named itself in its start."""
    with ingest(token_srv, "meet", token="p") as first, ingest(token_srv, "meet", token="p") as sec:
        sec.send(start(speaker="Ben"))
        ready(sec)
        first.send(start(speaker="Ana"))
        ready(first)
        assert still_open(first) and still_open(sec)
    # and a URL-named and a start-named joiner follow the same rule: Ana is taken by the URL
    with (
        ingest(token_srv, "meet2", token="p", speaker="Ana") as a,
        ingest(token_srv, "meet2", token="p") as b,
    ):
        a.send(start())
        ready(a)
        b.send(start(speaker="Cy"))
        ready(b)
        assert still_open(a) and still_open(b)


def test_an_open_server_refuses_a_taken_start_named_name_at_the_start() -> None:
    config = ServerConfig(port=0)
    with (
        ServerThread(config, FakeWorker(), stream_factory=fake_factory) as srv,
        ingest(srv, "r", token=None) as a,
    ):
        a.send(start(speaker="Ana"))
        ready(a)
        with ingest(srv, "r", token=None) as b:  # may be anyone: decided at its start
            assert still_open(b, 0.3)
            b.send(start(speaker="Ana"))
            err = expect_close(b, 1008)
            assert err is not None and "'Ana' is already publishing" in err["reason"]
        with ingest(srv, "r", token=None, speaker="Ana") as c:  # the URL says: refused at once
            err = expect_close(c, 1008)
            assert err is not None and "already publishing" in err["reason"]
        assert still_open(a)


# --------------------------------------------------------------------------- item 10: budget


def test_idle_sockets_from_one_address_do_not_lock_token_holders_out() -> None:
    """Was: 30 idle TCP sockets filled `--max-connections 30`; token holders were refused."""
    config = ServerConfig(
        port=0, publish_token="p", max_connections=30, max_pending_per_address=8,
        handshake_timeout_s=2.0,
    )  # fmt: skip
    with ServerThread(config, FakeWorker(), stream_factory=fake_factory) as srv:
        idle = [stranger_socket(srv.port) for _ in range(30)]
        time.sleep(1.4)  # the refused ones are held unread for 1 s, then dropped
        kept = [s for s in idle if not dropped(s, 0.05)]
        assert len(kept) == config.pending_per_address == 3  # min(8, 15 // 4); the rest refused
        with ingest(srv, "s", token="p") as ws:  # a token holder from 127.0.0.1
            ws.send(start())
            ready(ws)
        # and the kept idle sockets are dropped once their handshake time is up
        assert all(dropped(s, 3.0) for s in kept)
        for s in idle:
            s.close()


def test_start_less_publishers_hold_no_stream_slot() -> None:
    """Was: sockets that never sent `start` held a stream slot each until `--start-timeout`:
    a few of them blocked all publishing on a tokenless server."""
    config = ServerConfig(port=0, max_streams=1, start_timeout_s=3.0)
    with (
        ServerThread(config, FakeWorker(), stream_factory=fake_factory) as srv,
        contextlib.ExitStack() as stack,
    ):
        lurkers = [stack.enter_context(ingest(srv, f"lurk{i}", token=None)) for i in range(4)]
        time.sleep(0.2)
        with ingest(srv, "real", token=None) as ws:
            ws.send(start())
            ready(ws)
        for lurker in lurkers:
            err = expect_close(lurker, 1008)
            assert err is not None and "no start message" in err["reason"]


# --------------------------------------------------------------------------- item 8: downloads


def _recording(path: Path, stream: str, finals: int, words: int) -> None:
    text = " ".join(["caption"] * words)
    with path.open("w", encoding="utf-8") as f:
        for seq in range(1, finals + 1):
            cap = Caption(
                "final", stream, seq, seq, text, float(seq), seq + 0.5, len(text), 10.0, "ep1"
            )
            f.write(json.dumps(cap.to_dict()) + "\n")


def test_a_large_subtitle_download_is_served_whole_to_a_slow_reader(tmp_path: Path) -> None:
    """Was: `Content-Length: 29813985`, then the connection closed after 7 979 577 bytes (the
    handshake's 10 s deadline covered the response). Here 11 MB, more than the kernel's
    socket buffers hold, go to a reader that takes about 12 s."""
    _recording(tmp_path / "big.jsonl", "big", finals=8000, words=130)  # about 11 MB of VTT
    config = ServerConfig(port=0, record_dir=tmp_path)
    with ServerThread(config, FakeWorker(), stream_factory=fake_factory) as srv:
        s = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)
        s.sendall(f"GET /streams/big.vtt HTTP/1.1\r\nHost: 127.0.0.1:{srv.port}\r\n\r\n".encode())
        t0 = time.monotonic()
        parts = []
        while chunk := s.recv(65536):
            parts.append(chunk)
            time.sleep(0.07)  # at most about 0.9 MB/s
        data = b"".join(parts)
        took = time.monotonic() - t0
        s.close()
        head, _, body = data.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200")
        length = int(
            next(h for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")).split(
                b":"
            )[1]
        )
        assert length > 10_000_000 and len(body) == length, (length, len(body), took)
        assert took > 10.0  # longer than the old deadline
        assert body.startswith(b"WEBVTT") and body.rstrip().endswith(b"caption")


def _get(port: int, path: str, source: str = "127.0.0.1") -> tuple[bytes, bytes]:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind((source, 0))
    s.settimeout(30)
    s.connect(("127.0.0.1", port))
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
    parts = []
    while chunk := s.recv(1 << 20):
        parts.append(chunk)
    s.close()
    head, _, body = b"".join(parts).partition(b"\r\n\r\n")
    return head, body


def test_a_looping_downloader_is_held_to_its_budget(tmp_path: Path) -> None:
    """Was: a client looping `GET /streams/big.vtt` moved another stream's finals from 2.0 s
    to 6-7.5 s. Downloads now spend a per-address byte budget (429 with Retry-After beyond
    it); another address has its own."""
    _recording(tmp_path / "big.jsonl", "big", finals=3000, words=90)  # about 2.2 MB
    config = ServerConfig(port=0, record_dir=tmp_path, download_burst=3e6, download_rate=1e5)
    with ServerThread(config, FakeWorker(), stream_factory=fake_factory) as srv:
        head, body = _get(srv.port, "/streams/big.vtt")
        assert head.startswith(b"HTTP/1.1 200") and len(body) > 2_000_000
        head, body = _get(srv.port, "/streams/big.vtt")
        assert head.startswith(b"HTTP/1.1 429") and b"Retry-After: " in head
        assert b"too many subtitle downloads" in body
        head, _ = _get(srv.port, "/streams/big.vtt", source=STRANGER)
        assert head.startswith(b"HTTP/1.1 200")
        assert _get(srv.port, "/healthz")[0].startswith(b"HTTP/1.1 200")


def test_a_connection_loop_from_one_address_is_paced_and_held() -> None:
    """Past its burst, a client looping connections is refused at the accept, and the refused
    connection is held unread a moment first: the loop waits instead of spinning the server."""
    config = ServerConfig(port=0, max_accept_rate_per_address=20.0)
    with ServerThread(config, FakeWorker(), stream_factory=fake_factory) as srv:
        refused, held = 0, []
        for _ in range(230):  # a burst of 200, then 20 a second
            t0 = time.monotonic()
            try:
                head, _ = _get(srv.port, "/healthz")
            except OSError:  # reset: refused at the accept
                refused += 1
                held.append(time.monotonic() - t0)
                continue
            assert head.startswith(b"HTTP/1.1 200")
        assert refused >= 1 and min(held) >= 0.9  # each refusal came after ~1 s, not at once
        head, _ = _get(srv.port, "/healthz", source=STRANGER)  # another address: its own pace
        assert head.startswith(b"HTTP/1.1 200")
