"""The caption server for real: 127.0.0.1 sockets, the bundled Whisper base model, real speech.

One worker (and model) serves every server in this module. Publishers replay clips from
tests/data at real-time pace, as a microphone would. No timing is asserted, only what arrives.
"""

from __future__ import annotations

import contextlib
import json
import platform
import re
import socket
import ssl
import subprocess
import threading
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
    ingest,
    padded,
    recall,
    run_publish,
)
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from streamcap.audio.pcm import float_to_pcm
from streamcap.server.client import ws_url
from streamcap.server.config import ServerConfig
from streamcap.server.thread import ServerThread

pytestmark = pytest.mark.model

FRAME_LIMIT = 256 * 1024


@pytest.fixture(scope="module")
def server(worker: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    config = ServerConfig(
        port=0,
        publish_token=PUB,
        view_token=VIEW,
        allowed_origins=("https://studio.example",),
        max_streams=4,
        max_frame_bytes=FRAME_LIMIT,
        record_dir=tmp_path_factory.mktemp("record"),
    )
    with ServerThread(config, worker) as srv:
        yield srv


# --------------------------------------------------------------------------- real speech


def test_one_publisher_gets_partials_and_final(server: ServerThread, speech: dict) -> None:
    ref = "and mister john dashwood had then leisure to consider how much there might be"
    viewer = Collector(server, "solo")
    run_publish(server, "solo", padded(speech["en_real_librivox_0870"]))
    assert viewer.wait_for(lambda v: v.finals() and recall(v.text(), ref) > 0.8, 30), viewer.events
    viewer.stop()
    kinds = [e["type"] for e in viewer.events]
    assert "partial" in kinds and "final" in kinds
    seqs = [e["seq"] for e in viewer.events]
    assert seqs == sorted(set(seqs)) and seqs[0] >= 1
    assert all(e["stream"] == "solo" for e in viewer.events)
    assert set(viewer.events[0]) - {"tentative"} == {
        "type", "stream", "seq", "segment", "text", "start", "end", "committed_chars",
        "latency_ms", "epoch",
    }  # fmt: skip
    # a partial's words not shown yet (for a word-by-word highlight); never on a final
    assert all("tentative" not in e for e in viewer.finals())
    assert len({e["epoch"] for e in viewer.events}) == 1

    # Every final was recorded as it happened, and is served as SRT/VTT.
    record = server.config.record_dir
    assert record is not None
    lines = (record / "solo.jsonl").read_text().splitlines()
    assert [json.loads(x)["text"] for x in lines] == [e["text"] for e in viewer.finals()]
    status, ctype, srt = http_get(server.url(f"/streams/solo.srt?token={VIEW}"))
    assert status == 200 and "subrip" in ctype and "-->" in srt
    assert recall(srt, "john dashwood") == 1.0
    status, ctype, vtt = http_get(server.url(f"/streams/solo.vtt?token={VIEW}"))
    assert status == 200 and vtt.startswith("WEBVTT")
    assert http_get(server.url("/streams/solo.srt"))[0] == 401
    assert http_get(server.url(f"/streams/nobody.srt?token={VIEW}"))[0] == 404


def test_two_publishers_several_viewers(server: ServerThread, speech: dict) -> None:
    clips = {"left": "en_real_goforward", "right": "en_tts_piper_joe_s07"}
    refs = {"left": "go forward ten meters", "right": "the last five minutes for questions"}
    # Viewers connect before their streams exist: they wait for them (unknown_stream="wait").
    viewers = {s: [Collector(server, s) for _ in range(3)] for s in clips}
    time.sleep(0.3)
    threads = [
        threading.Thread(target=run_publish, args=(server, s, padded(speech[c])))
        for s, c in clips.items()
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for stream, group in viewers.items():
        for v in group:
            assert v.wait_for(lambda v, r=refs[stream]: recall(v.text(), r) >= 0.75, 30), (
                stream,
                v.events,
            )
            assert all(e["stream"] == stream for e in v.events)
        # Every viewer of a stream got the same finals (partials may be coalesced).
        finals = [[(e["seq"], e["text"]) for e in v.finals()] for v in group]
        assert all(f == finals[0] for f in finals), finals
        for v in group:
            v.stop()


def test_reconnect_with_since_misses_nothing(server: ServerThread, speech: dict) -> None:
    stream = "reconnect"
    first = Collector(server, stream)
    pub = threading.Thread(target=run_publish, args=(server, stream, padded(speech["en_real_jfk"])))
    pub.start()
    assert first.wait_for(lambda v: len(v.events) >= 1, 30)
    first.stop()  # drops the connection after its next event
    assert first.wait_for(lambda v: not v._thread.is_alive(), 30)
    last = first.events[-1]["seq"]
    time.sleep(2.0)  # events happen while it is away
    second = Collector(server, stream, since=last)
    pub.join(60)
    everything = Collector(server, stream, since=0)
    ref = "ask not what your country can do for you ask what you can do for your country"
    assert everything.wait_for(lambda v: recall(v.text(), ref) > 0.8, 30), everything.events
    final_seqs = {e["seq"] for e in everything.finals()}
    first_seqs = {e["seq"] for e in first.finals()}
    assert second.wait_for(lambda v: first_seqs | {e["seq"] for e in v.finals()} >= final_seqs, 30)
    got = {e["seq"] for e in first.finals()} | {e["seq"] for e in second.finals()}
    assert got == final_seqs
    assert all(e["seq"] > last for e in second.events)
    # Replay of an ended stream rebuilds the same screen: every final, in order.
    assert [e["text"] for e in everything.finals()] == [
        e["text"] for e in sorted(first.finals() + second.finals(), key=lambda e: e["seq"])
    ]
    for v in (second, everything):
        v.stop()


def test_abrupt_disconnect_still_gets_final(server: ServerThread, speech: dict) -> None:
    stream = "abrupt"
    viewer = Collector(server, stream)
    audio = speech["en_real_librivox_0880"]  # "he was not an ill disposed young man"
    with ingest(server, stream) as ws:
        ws.send(json.dumps(START))
        assert json.loads(ws.recv(timeout=10))["type"] == "ready"
        t0 = time.monotonic()
        cut = int(2.2 * SR)  # mid-utterance: the speaker is still talking
        for k, i in enumerate(range(0, cut, SR // 10)):
            time.sleep(max(0.0, t0 + k * 0.1 - time.monotonic()))
            ws.send(float_to_pcm(audio[i : min(i + SR // 10, cut)]))
        ws.socket.shutdown(socket.SHUT_RDWR)  # no close frame: the connection just dies
    ok = viewer.wait_for(lambda v: recall(v.text(), "he was not an ill") >= 0.6, 60)
    assert ok, viewer.events
    viewer.stop()


# --------------------------------------------------------------------------- bad input


@pytest.fixture(scope="module")
def background(server: ServerThread, speech: dict) -> Iterator[dict[str, Any]]:
    """A good stream publishing all through the bad-input tests (the server must keep serving)."""
    viewer = Collector(server, "steady")
    # A viewer that stops reading: its client takes one message and then leaves the socket
    # unread. It must not hold up the stream or the other viewer.
    url = ws_url(base(server), "captions", "steady", token=VIEW)
    stack = contextlib.ExitStack()
    stack.enter_context(connect(url, max_queue=1, close_timeout=1))
    state: dict[str, Any] = {"viewer": viewer, "error": None}

    def run() -> None:
        try:
            run_publish(server, "steady", padded(speech["en_real_librivox_0870"]))
        except BaseException as e:  # noqa: BLE001
            state["error"] = e

    state["thread"] = threading.Thread(target=run, daemon=True)
    state["thread"].start()
    yield state
    viewer.stop()
    stack.close()


def _pcm(seconds: float) -> bytes:
    return float_to_pcm(np.zeros(int(seconds * SR), np.float32))


BAD_INGEST: dict[str, tuple[list[Any], int]] = {
    "malformed json": (["{not json"], 1003),
    "json not an object": (["[1, 2]"], 1003),
    "unknown type": ([START, {"type": "pause"}], 1003),
    "duplicate start": ([START, START], 1003),
    "audio before start": ([b"\x00\x00" * 160], 1003),
    "odd-length pcm": ([START, b"\x00\x00\x00"], 1003),
    "bad format": ([{**START, "format": "mp3"}], 1003),
    "bad rate": ([{**START, "sample_rate": 96000}], 1003),
    "too-low rate": ([{**START, "sample_rate": 4000}], 1003),
    "unknown language": ([{**START, "language": "xx"}], 1003),
    "unknown start field": ([{**START, "langauge": "en"}], 1003),
    "oversize frame": ([START, b"\x00" * (FRAME_LIMIT + 2)], 1009),
    "flood": ([START, _pcm(2.0), _pcm(2.0), _pcm(2.0), _pcm(2.0)], 1008),
    "stop closes normally": ([START, {"type": "stop"}], 1000),
}


@pytest.mark.parametrize("name", list(BAD_INGEST))
def test_bad_ingest_input(server: ServerThread, background: dict, name: str) -> None:
    steps, code = BAD_INGEST[name]
    with ingest(server, f"bad-{name.replace(' ', '-')}") as ws:
        for i, step in enumerate(steps):
            if isinstance(step, dict):
                ws.send(json.dumps(step))
            else:
                ws.send(step)
            if i == 0 and step == START:
                assert json.loads(ws.recv(timeout=10))["type"] == "ready"
        expect_close(ws, code)


@pytest.mark.parametrize("route", ["ingest", "captions"])
@pytest.mark.parametrize("token", [None, "wrong", PUB + "x"])
def test_wrong_or_missing_token(
    server: ServerThread, background: dict, route: str, token: str | None
) -> None:
    if route == "captions" and token == PUB + "x":
        token = PUB  # the publish token does not let anyone view
    with connect(ws_url(base(server), route, "steady", token=token)) as ws:
        err = expect_close(ws, 1008)
    assert err is not None and "token" in err["reason"]


def test_bearer_token_header_works(server: ServerThread, background: dict) -> None:
    headers = {"Authorization": f"Bearer {VIEW}"}
    with connect(ws_url(base(server), "captions", "steady"), additional_headers=headers) as ws:
        ev = json.loads(ws.recv(timeout=60))  # the background stream is live
    assert ev["stream"] == "steady"


@pytest.mark.parametrize(
    "origin, allowed",
    [
        ("https://evil.example", False),
        ("null", False),
        ("https://studio.example", True),  # on the allow-list
        (None, True),  # not a browser
        ("same", True),
    ],
)
def test_origin_check(server: ServerThread, origin: str | None, allowed: bool) -> None:
    if origin == "same":
        origin = f"http://127.0.0.1:{server.port}"
    url = ws_url(base(server), "captions", "steady", token=VIEW)
    if allowed:
        with connect(url, origin=origin):  # type: ignore[arg-type]
            pass
    else:
        with pytest.raises(InvalidStatus) as info:
            connect(url, origin=origin)  # type: ignore[arg-type]
        assert info.value.response.status_code == 403


@pytest.mark.parametrize(
    "path", ["/ingest?token=x", "/ingest?stream=a%20b&token=x", "/captions?stream=s&since=-1"]
)
def test_bad_path_parameters(server: ServerThread, path: str) -> None:
    with connect(base(server) + path) as ws:
        expect_close(ws, 1003 if "since" in path else 1008)


def test_background_stream_was_not_disturbed(background: dict) -> None:
    background["thread"].join(120)
    assert background["error"] is None
    ref = "how much there might be prudently in his power to do for them"
    viewer = background["viewer"]
    assert viewer.wait_for(lambda v: recall(v.text(), ref) > 0.8, 30), viewer.events


# --------------------------------------------------------------------------- limits, HTTP, TLS


def test_limits_and_unknown_stream_reject(worker: Any) -> None:
    config = ServerConfig(
        port=0, max_streams=1, max_viewers=1, idle_timeout_s=2.0, unknown_stream="reject"
    )
    with ServerThread(config, worker) as srv:
        b = base(srv)
        with connect(ws_url(b, "captions", "ghost")) as ws:
            err = expect_close(ws, 1008)
        assert err is not None and "unknown stream" in err["reason"]
        with connect(ws_url(b, "ingest", "one")) as one:
            one.send(json.dumps(START))
            assert json.loads(one.recv(timeout=10))["type"] == "ready"
            with connect(ws_url(b, "ingest", "two")) as two:
                err = expect_close(two, 1008)
            assert err is not None and "limit" in err["reason"]
            with connect(ws_url(b, "captions", "one")) as v1:
                with connect(ws_url(b, "captions", "one")) as v2:
                    err = expect_close(v2, 1008)
                assert err is not None and "viewers" in err["reason"]
                v1.close()
            err = expect_close(one, 1008)  # idle: nothing sent for 2 s
        assert err is not None and "nothing received" in err["reason"]


def test_http_routes(server: ServerThread) -> None:
    status, ctype, body = http_get(server.url("/"))
    assert status == 200 and ctype.startswith("text/html") and "getUserMedia" in body
    status, ctype, body = http_get(server.url("/overlay"))
    assert status == 200 and "CaptionConnection" in body
    status, ctype, body = http_get(server.url("/static/mic-worklet.js"))
    assert status == 200 and "javascript" in ctype and "registerProcessor" in body
    assert http_get(server.url("/healthz"))[0] == 200
    for bad in ("/static/..%2Fpyproject.toml", "/static/.hidden", "/nope", "/static/"):
        assert http_get(server.url(bad))[0] == 404, bad
    assert http_get(server.url("/captions"))[0] == 426


def test_metrics(server: ServerThread) -> None:
    status, ctype, body = http_get(server.url("/metrics"))
    assert status == 200 and ctype.startswith("text/plain")
    values = {}
    for line in body.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            values[name] = float(value)
    for name in (
        "streamcap_streams",
        "streamcap_viewers",
        "streamcap_audio_seconds_total",
        "streamcap_decode_seconds_total",
        "streamcap_queue_depth",
        "streamcap_final_latency_seconds_count",
        "streamcap_drafted_tokens_total",
        "streamcap_accepted_tokens_total",
    ):
        assert name in values, name
    assert values["streamcap_audio_seconds_total"] > 5
    assert values["streamcap_final_latency_seconds_count"] >= 1
    assert values['streamcap_captions_total{type="final"}'] >= 1
    assert values['streamcap_connections_refused_total{reason="auth"}'] >= 1
    assert values["streamcap_finals_in_memory"] >= 1  # the finals above, held for replay
    assert values["process_resident_memory_bytes"] > 100e6  # a model is loaded
    if platform.libc_ver()[0] == "glibc":  # the C heap, as glibc's mallinfo2 counts it
        assert values['streamcap_heap_bytes{kind="in_use"}'] > 50e6
        assert 'streamcap_heap_bytes{kind="free"}' in values


def test_tls(worker: Any, tmp_path: Path) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    config = ServerConfig(port=0, tls_cert=cert, tls_key=key, view_token=VIEW)
    ctx = ssl.create_default_context(cafile=str(cert))
    with ServerThread(config, worker) as srv:
        assert srv.url("/").startswith("https://")
        assert http_get(srv.url("/healthz"), ctx)[0] == 200
        url = ws_url(srv.url("", websocket=True), "captions", "x", token="nope")
        assert url.startswith("wss://")
        with connect(url, ssl=ctx) as ws:
            expect_close(ws, 1008)
        with pytest.raises(Exception):  # noqa: B017 - plain ws to the TLS port: no handshake
            connect(ws_url(f"ws://127.0.0.1:{srv.port}", "captions", "x"), open_timeout=5)


def test_protocol_doc_example_runs(worker: Any, tmp_path: Path, speech: dict) -> None:
    import sys

    import soundfile as sf

    doc = (Path(__file__).resolve().parents[2] / "docs" / "protocol.md").read_text()
    code = re.search(r"```python\n(.*?)```", doc, re.DOTALL)
    assert code is not None
    wav = tmp_path / "speech.wav"
    sf.write(wav, padded(speech["en_real_praatio_mary"]), SR, subtype="PCM_16")
    with ServerThread(ServerConfig(port=0), worker) as srv:
        source = code.group(1).replace('"ws://127.0.0.1:8765"', repr(base(srv)))
        source = source.replace('"speech.wav"', repr(str(wav))) + "time.sleep(1.0)\n"
        run = subprocess.run(
            [sys.executable, "-c", source], capture_output=True, text=True, timeout=120
        )
    assert run.returncode == 0, run.stderr
    assert "final" in run.stdout and "barrel" in run.stdout.lower(), run.stdout


# --------------------------------------------------------------------------- the commands


def _cli(*args: str) -> list[str]:
    import sys

    return [sys.executable, "-m", "streamcap.cli", *args]


def test_demo_command_prints_captions_and_overlay_url() -> None:
    run = subprocess.run(_cli("demo"), capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert re.search(r"http://127\.0\.0\.1:\d+/overlay\?stream=demo", run.stdout), run.stdout
    assert recall(run.stdout, "ask not what your country can do for you") > 0.8, run.stdout


def test_serve_command_starts_and_stops_cleanly(tmp_path: Path) -> None:
    import signal

    proc = subprocess.Popen(
        _cli("serve", "--port", "0", "--record", str(tmp_path), "--view-token", VIEW),
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        url = None
        assert proc.stderr is not None
        for line in proc.stderr:
            m = re.search(r"serving on (http://\S+)", line)
            if m:
                url = m.group(1)
                break
        assert url is not None, "no 'serving on' line"
        assert http_get(url + "healthz")[0] == 200
        assert http_get(url + "streams/x.srt")[0] == 401
        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
