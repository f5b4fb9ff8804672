"""The caption server under a hostile client and a careless operator (issue 8), for real:
servers on 127.0.0.1, the bundled Whisper base model, real speech, real sockets.

Each test names the bug or weakness it guards against; each failed before the fix.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from serverkit import (
    PUB,
    SR,
    START,
    VIEW,
    Collector,
    base,
    expect_close,
    http_get,
    padded,
    recall,
    run_publish,
)
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import ClientConnection, connect

from streamcap.audio.pcm import float_to_pcm
from streamcap.server.client import ws_url
from streamcap.server.config import ServerConfig
from streamcap.server.thread import ServerThread

pytestmark = pytest.mark.model

MARY = "mary rolled the barrel"
DASHWOOD = "and mister john dashwood had then leisure to consider how much there might be"


@pytest.fixture(scope="module")
def server(worker: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    config = ServerConfig(
        port=0,
        publish_token=PUB,
        view_token=VIEW,
        metrics_token="metrics-secret",
        allowed_hosts=("captions.example",),
        start_timeout_s=1.5,
        record_dir=tmp_path_factory.mktemp("record"),
    )
    with ServerThread(config, worker) as srv:
        yield srv


@pytest.fixture(scope="module")
def open_server(worker: Any) -> Iterator[ServerThread]:
    """No tokens at all (the default a person gets on localhost)."""
    with ServerThread(ServerConfig(port=0, max_connections=24), worker) as srv:
        yield srv


@contextlib.contextmanager
def live_publisher(
    srv: ServerThread, stream: str, audio: np.ndarray, token: str | None = PUB
) -> Iterator[ClientConnection]:
    """A publisher that has sent `audio` at real-time pace and is still connected (no stop)."""
    with connect(ws_url(base(srv), "ingest", stream, token=token), compression=None) as ws:
        _send_live(ws, audio)
        yield ws


def _send_live(ws: ClientConnection, audio: np.ndarray) -> None:
    ws.send(json.dumps(START))
    assert json.loads(ws.recv(timeout=10))["type"] == "ready"
    step = SR // 10
    t0 = time.monotonic()
    for k, i in enumerate(range(0, len(audio), step)):
        delay = t0 + k * 0.1 - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        ws.send(float_to_pcm(audio[i : i + step]))


def metric(srv: ServerThread, name: str) -> float:
    status, _, body = http_get(srv.url("/metrics?token=metrics-secret"))
    assert status == 200
    for line in body.splitlines():
        if line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def raw_http(srv: ServerThread, request: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as s:
        s.sendall(request)
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


# --------------------------------------------------------------------------- bugs 1, 2, 5


def test_a_static_name_too_long_for_the_file_system_is_404_and_counted(
    server: ServerThread, caplog: pytest.LogCaptureFixture
) -> None:
    counted = 'streamcap_http_requests_total{status="404"}'
    before = metric(server, counted)
    with caplog.at_level(logging.INFO):
        for n in (256, 300, 4000):
            assert http_get(server.url("/static/" + "a" * n))[0] == 404
            assert http_get(server.url("/static/" + "b" * n + ".js"))[0] == 404
    assert metric(server, counted) == before + 6
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]


def test_a_5000_digit_sample_rate_closes_1003(server: ServerThread) -> None:
    with connect(ws_url(base(server), "ingest", "digits", token=PUB)) as ws:
        ws.send('{"type":"start","sample_rate":' + "7" * 5000 + ',"format":"pcm_s16le"}')
        err = expect_close(ws, 1003)
    assert err is not None and "cannot be read" in err["reason"]


def test_a_stream_exists_only_from_its_start_message(server: ServerThread) -> None:
    srt = server.url(f"/streams/nostart.srt?token={VIEW}")
    with connect(ws_url(base(server), "ingest", "nostart", token=PUB)) as ws:
        assert http_get(srt)[0] == 404  # connected, no start yet
        err = expect_close(ws, 1008)  # and the start has a deadline of its own
    assert err is not None and "no start message" in err["reason"]
    assert http_get(srt)[0] == 404  # the socket left: still nothing
    assert server.server is not None and server.server.hub.get("nostart") is None


def test_sockets_that_never_start_cannot_hold_the_stream_slots(worker: Any) -> None:
    """A stream slot is taken at a valid start (issue 21 item 10): sockets that never start
    hold none, and `--max-streams` still counts the publishers that did."""
    config = ServerConfig(port=0, max_streams=2, start_timeout_s=1.0)
    with ServerThread(config, worker) as srv, contextlib.ExitStack() as stack:
        idle = [
            stack.enter_context(connect(ws_url(base(srv), "ingest", f"idle{i}"))) for i in (1, 2)
        ]
        started = []
        for name in ("third", "fourth"):
            ws = stack.enter_context(connect(ws_url(base(srv), "ingest", name)))
            ws.send(json.dumps(START))
            assert json.loads(ws.recv(timeout=10))["type"] == "ready"
            started.append(ws)
        with connect(ws_url(base(srv), "ingest", "fifth")) as ws:  # two have started: full
            assert "limit of 2 streams" in (expect_close(ws, 1008) or {}).get("reason", "")
        for ws in idle:
            assert "no start message" in (expect_close(ws, 1008) or {}).get("reason", "")


# --------------------------------------------------------------------------- bug 3: since


def test_since_beyond_the_log_or_from_another_epoch_replays_everything(
    server: ServerThread, speech: dict
) -> None:
    viewer = Collector(server, "resume")
    run_publish(server, "resume", padded(speech["en_real_praatio_mary"]))
    assert viewer.wait_for(lambda v: v.finals() and recall(v.text(), MARY) > 0.7, 30)
    viewer.stop()
    seqs = [e["seq"] for e in viewer.events]
    epoch = viewer.events[0]["epoch"]
    last = seqs[-1]
    stored = [e for e in viewer.events if e["type"] == "final"]

    def replay(**params: Any) -> list[dict[str, Any]]:
        v = Collector(server, "resume", **params)
        assert v.wait_for(lambda c: len(c.events) >= len(stored), 10)
        time.sleep(0.3)  # nothing more arrives
        v.stop()
        return v.events

    # A `since` this log never reached (e.g. from before a restart): the whole current log.
    assert [e["seq"] for e in replay(since=last + 1000)] == [e["seq"] for e in stored]
    # Another log's epoch with a plausible since: the whole current log too.
    got = replay(since=max(1, last - 1), epoch="0ther0epoch0")
    assert [e["seq"] for e in got] == [e["seq"] for e in stored]
    # The right epoch: exactly what came after `since`.
    first_final = stored[0]["seq"]
    got = replay(since=first_final - 1, epoch=epoch)
    assert [e["seq"] for e in got][0] == first_final
    assert all(e["epoch"] == epoch for e in got)


# --------------------------------------------------------------------------- takeover


def test_an_open_server_refuses_a_second_live_publisher(
    open_server: ServerThread, speech: dict
) -> None:
    first = speech["en_real_praatio_mary"][: SR // 2]
    with (
        live_publisher(open_server, "busy", first, None),
        connect(ws_url(base(open_server), "ingest", "busy")) as ws,
    ):
        ws.send(json.dumps(START))  # unnamed: its start could have named it (one claim rule)
        err = expect_close(ws, 1008)
    assert err is not None and "already has a publisher" in err["reason"]


def test_a_publisher_that_dropped_can_come_back_at_once(
    open_server: ServerThread, speech: dict
) -> None:
    viewer = Collector(open_server, "flaky", token=None)
    audio = padded(speech["en_real_librivox_0870"], after=0.0)
    cut = int(3.5 * SR)
    with live_publisher(open_server, "flaky", audio[:cut], None) as ws:
        ws.socket.shutdown(socket.SHUT_RDWR)  # the network goes away: no close frame
    # Reconnect right away: accepted while the old session is still being finalised.
    url = ws_url(base(open_server), "ingest", "flaky")
    run_publish_url(url, padded(audio[cut:]))
    assert viewer.wait_for(lambda v: recall(v.text(), DASHWOOD) > 0.7, 30), viewer.events
    viewer.stop()
    segs = [e["segment"] for e in viewer.finals()]
    assert segs == sorted(segs) and len(set(segs)) == len(segs)


def test_the_same_publish_token_takes_a_live_stream_over(
    server: ServerThread, speech: dict
) -> None:
    viewer = Collector(server, "takeover")
    with live_publisher(server, "takeover", padded(speech["en_real_praatio_mary"], after=0)) as old:
        # The old socket is still open (e.g. a half-open TCP connection after a network switch).
        url = ws_url(base(server), "ingest", "takeover", token=PUB)
        run_publish_url(url, padded(speech["en_real_librivox_0880"]))
        with pytest.raises(ConnectionClosed) as info:
            while True:
                old.recv(timeout=30)
    assert info.value.rcvd is not None and info.value.rcvd.code == 1001
    assert "replaced" in info.value.rcvd.reason
    assert viewer.wait_for(lambda v: len(v.finals()) >= 2, 30), viewer.events
    viewer.stop()
    text = viewer.text()
    # The old connection's audio was finalised first, then the new one's.
    assert recall(text, MARY) > 0.7 and recall(text, "he was not an ill disposed young man") > 0.7
    mary_at = max(i for i, e in enumerate(viewer.finals()) if "barrel" in e["text"].lower())
    assert mary_at == 0, viewer.finals()


def run_publish_url(url: str, audio: np.ndarray) -> None:
    from streamcap.server.client import publish

    asyncio.run(publish(url, audio, SR))


# --------------------------------------------------------------------------- access


def test_dns_rebinding_host_header_is_refused(server: ServerThread) -> None:
    port = server.port
    for host in (f"evil.example:{port}", "evil.example"):
        reply = raw_http(server, f"GET /healthz HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
        assert reply.startswith(b"HTTP/1.1 421"), reply[:80]
    ok = raw_http(
        server, f"GET /healthz HTTP/1.1\r\nHost: captions.example:{port}\r\n\r\n".encode()
    )
    assert ok.startswith(b"HTTP/1.1 200")
    # A page on evil.example, re-pointed at 127.0.0.1: Origin equals Host, yet it is refused.
    url = ws_url(base(server), "captions", "x", token=VIEW)
    with pytest.raises(InvalidStatus) as info:
        connect(
            url,
            origin=f"http://evil.example:{port}",  # type: ignore[arg-type]
            additional_headers={"Host": f"evil.example:{port}"},
        )
    assert info.value.response.status_code == 421


def test_metrics_need_their_token(server: ServerThread, open_server: ServerThread) -> None:
    assert http_get(server.url("/metrics"))[0] == 401
    assert http_get(server.url("/metrics?token=wrong"))[0] == 401
    assert http_get(server.url("/metrics?token=metrics-secret"))[0] == 200
    bearer = {"Authorization": "Bearer metrics-secret"}
    assert http_get(server.url("/metrics"), headers=bearer)[0] == 200
    assert http_get(open_server.url("/metrics"))[0] == 200  # bound to localhost, no token


def test_connections_are_capped_before_the_handshake(open_server: ServerThread) -> None:
    cap = open_server.config.connection_limit
    socks = []
    try:
        for _ in range(cap):
            socks.append(socket.create_connection(("127.0.0.1", open_server.port), timeout=5))
        time.sleep(0.3)
        extra = socket.create_connection(("127.0.0.1", open_server.port), timeout=5)
        extra.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        with contextlib.suppress(ConnectionResetError):
            assert extra.recv(100) == b""  # dropped without an answer
        extra.close()
    finally:
        for s in socks:
            s.close()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if http_get(open_server.url("/healthz"))[0] == 200:
            break
        time.sleep(0.1)
    assert http_get(open_server.url("/healthz"))[0] == 200


def test_a_flood_of_empty_frames_is_stopped(server: ServerThread) -> None:
    with connect(ws_url(base(server), "ingest", "flood", token=PUB)) as ws:
        ws.send(json.dumps(START))
        assert json.loads(ws.recv(timeout=10))["type"] == "ready"
        sent = 0
        with pytest.raises(ConnectionClosed) as info:
            for _ in range(1_000_000):
                ws.send(b"")
                sent += 1
        assert sent < 100_000
    assert info.value.rcvd is not None and info.value.rcvd.code == 1008
    assert "too many messages" in info.value.rcvd.reason


# --------------------------------------------------------------------------- logs


def test_stream_start_stop_and_refusals_are_logged_without_tokens(
    server: ServerThread, speech: dict, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, "streamcap.server"):
        run_publish(server, "logged", padded(speech["en_real_praatio_mary"]))
        for _ in range(40):
            with connect(ws_url(base(server), "captions", "logged", token="not-the-token")) as ws:
                expect_close(ws, 1008)
        time.sleep(0.2)
    lines = [r.getMessage() for r in caplog.records if r.name == "streamcap.server"]
    assert any("stream logged started" in x for x in lines), lines
    assert any("stream logged stopped" in x for x in lines), lines
    refusals = [x for x in lines if "refused" in x and "auth" in x]
    assert 1 <= len(refusals) <= 6, refusals  # rate-limited
    assert not any("not-the-token" in x or PUB in x or VIEW in x for x in lines)


# --------------------------------------------------------------------------- shutdown


def test_shutdown_delivers_the_open_utterance_before_closing_viewers(
    worker: Any, speech: dict, tmp_path: Path
) -> None:
    config = ServerConfig(port=0, record_dir=tmp_path)
    srv = ServerThread(config, worker).start()
    viewer = Collector(srv, "bye", token=None)
    speech_only = speech["en_real_librivox_0870"][: 4 * SR]  # stops mid-sentence, no pause
    try:
        with live_publisher(srv, "bye", speech_only, None) as pub:
            assert viewer.wait_for(lambda v: any(e["type"] == "partial" for e in v.events), 20)
            finals_before = len(viewer.finals())
            open_segment = [e for e in viewer.events if e["type"] == "partial"][-1]["segment"]
            srv.stop()  # what SIGTERM / Ctrl-C do in `streamcap serve`
            with pytest.raises(ConnectionClosed) as info:
                pub.recv(timeout=10)
            assert info.value.rcvd is not None and info.value.rcvd.code == 1001
    finally:
        srv.stop()
    assert viewer.ended.wait(30)
    assert viewer.close is not None and viewer.close[0] == 1001, viewer.close
    finals = viewer.finals()
    assert len(finals) > finals_before, viewer.events  # the interrupted utterance's final
    assert finals[-1]["segment"] >= open_segment and finals[-1]["text"].strip()
    assert recall(" ".join(e["text"] for e in finals), "and mister john dashwood") > 0.7
    recorded = [json.loads(x) for x in (tmp_path / "bye.jsonl").read_text().splitlines()]
    assert [e["seq"] for e in recorded] == [e["seq"] for e in finals if e["text"].strip()]


def test_restart_continues_the_log_from_the_recording(
    worker: Any, speech: dict, tmp_path: Path
) -> None:
    config = ServerConfig(port=0, record_dir=tmp_path)
    with ServerThread(config, worker) as srv:
        early = Collector(srv, "talk", token=None)
        run_publish(srv, "talk", padded(speech["en_real_praatio_mary"]))
        assert early.wait_for(lambda v: v.finals(), 30)
        early.stop()
        seen = early.events[-1]
        run_publish(srv, "talk", padded(speech["en_real_librivox_0880"]))  # missed by the viewer
    with ServerThread(config, worker) as srv2:  # same DIR, a new process in real life
        srt = http_get(srv2.url("/streams/talk.srt"))
        assert srt[0] == 200 and "barrel" in srt[2].lower() and "disposed" in srt[2].lower()
        back = Collector(srv2, "talk", since=seen["seq"], epoch=seen["epoch"], token=None)
        run_publish(srv2, "talk", padded(speech["en_real_librivox_0880"]))
        assert back.wait_for(lambda v: len(v.finals()) >= 2, 30), back.events
        back.stop()
    got = back.finals()
    seqs = [e["seq"] for e in back.events]
    assert seqs == sorted(set(seqs)) and seqs[0] > seen["seq"]  # nothing twice
    assert {e["epoch"] for e in back.events} == {seen["epoch"]}
    assert "disposed" in got[0]["text"].lower()  # missed while away: the second final
    assert recall(got[-1]["text"], "he was not an ill disposed young man") > 0.7
    recorded = [json.loads(x) for x in (tmp_path / "talk.jsonl").read_text().splitlines()]
    rec_seqs = [e["seq"] for e in recorded]
    assert rec_seqs == sorted(set(rec_seqs))  # no seq repeated across the restart
    segs = [e["segment"] for e in recorded]
    assert segs == sorted(set(segs))
    starts = [e["start"] for e in recorded]
    assert starts == sorted(starts)  # stream time continues too
