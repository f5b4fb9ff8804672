"""Issue 21: text a client sends is checked once at the protocol edge (well-formed Unicode, no
control or format characters, names NFKC), one event that cannot be encoded never ends a
viewer, a recorder or a stream, and the CLI checks --port before the model loads.

The server tests run a real server on loopback with a stand-in stream (no model): each
test names the bug it guards against; each failed before the fix.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from serverkit import (
    SR,
    START,
    Collector,
    FakeWorker,
    expect_close,
    fake_factory,
    http_get,
    ingest,
)
from websockets.sync.client import connect

from streamcap.core.captions import Caption
from streamcap.server.client import ws_url
from streamcap.server.client_text import parse_speaker
from streamcap.server.close import CloseCode, ProtocolError
from streamcap.server.config import ServerConfig
from streamcap.server.protocol import IngestState, parse_control, parse_start
from streamcap.server.record import Recorder
from streamcap.server.request import parse_ws_path
from streamcap.server.thread import ServerThread

SURROGATE = "\\udfff"  # a JSON escape: json.loads makes it a lone surrogate


def start(**fields: Any) -> str:
    return json.dumps({**START, **fields})


def start_raw(extra: str) -> str:
    """A start message with `extra` (raw JSON text, escapes kept) as its last fields."""
    return json.dumps(START)[:-1] + ", " + extra + "}"


# --------------------------------------------------------------------------- the protocol edge


@pytest.mark.parametrize(
    "extra",
    [
        f'"speaker": "B{SURROGATE}"',
        f'"prompt": "hello {SURROGATE}"',
        f'"vocabulary": ["Kubernetes", "x{SURROGATE}"]',
        f'"vocabulary": "a, b{SURROGATE}"',
        f'"language": "e{SURROGATE}n"',
        f'"task": "{SURROGATE}"',
    ],
)
def test_a_lone_surrogate_in_any_start_field_is_refused_with_1003(extra: str) -> None:
    with pytest.raises(ProtocolError) as info:
        parse_start(start_raw(extra))
    assert info.value.code == CloseCode.UNSUPPORTED_DATA
    assert "Unicode" in info.value.reason
    info.value.reason.encode("utf-8")  # the reason itself can be sent


@pytest.mark.parametrize(
    "name",
    ["B\u200b", "\u202eevil", "A\x9bB", "x\x7f", "zero\u2060width", "a\ue000", "\ufeffBOM"],
)
def test_control_and_format_characters_are_refused_in_names(name: str) -> None:
    with pytest.raises(ProtocolError) as info:
        parse_speaker(name)
    assert info.value.code == CloseCode.UNSUPPORTED_DATA
    with pytest.raises(ProtocolError):
        parse_start(start(speaker=name))


def test_names_are_nfkc_so_look_alikes_collide() -> None:
    assert parse_speaker("\uff21lice") == "Alice"  # full-width A
    assert parse_speaker("ﬁona") == "fiona"  # the fi ligature
    assert parse_speaker("  Ann   Lee ") == "Ann Lee"
    assert parse_speaker("Zoë") == parse_speaker("Zoe\u0308")  # composed = decomposed


@pytest.mark.parametrize("bad", ["\u202e", "\x00", "\x1b[31m", "\u200b", "\x85"])
def test_control_and_format_characters_are_refused_in_prompts(bad: str) -> None:
    for fields in ({"prompt": f"a{bad}b"}, {"vocabulary": [f"a{bad}b"]}):
        with pytest.raises(ProtocolError) as info:
            parse_start(start(**fields))
        assert info.value.code == CloseCode.UNSUPPORTED_DATA


def test_tabs_and_line_breaks_in_prompts_become_spaces_and_joiners_stay() -> None:
    msg = parse_start(start(prompt="line one\nline\ttwo\r\n"))
    assert "\n" not in msg.prompt and "\t" not in msg.prompt and "line one" in msg.prompt
    persian = "می\u200cخواهم"  # ZWNJ is part of the spelling
    assert "\u200c" in parse_start(start(prompt=persian)).prompt


@pytest.mark.parametrize("fmt", [[], {}, [1], {"a": 1}])
def test_a_list_or_object_where_a_string_goes_is_1003_not_a_traceback(fmt: Any) -> None:
    for field in ("format", "task", "speakers", "language", "type"):
        with pytest.raises(ProtocolError) as info:
            parse_start(start(**{field: fmt}))
        assert info.value.code == CloseCode.UNSUPPORTED_DATA, field
        assert info.value.reason


@pytest.mark.parametrize(
    "query",
    [
        "stream=s&speaker=B%ED%BF%BF",  # percent-encoded surrogate: decoded with replacement
        "stream=s&speaker=A%E2%80%AE",  # U+202E
        "stream=s&token=\udcff",  # a raw byte (websockets decodes with surrogateescape)
        "stream=s&x=%00",
    ],
)
def test_query_values_are_checked_too(query: str) -> None:
    try:
        _, params = parse_ws_path("/ingest?" + query)
    except ProtocolError as e:
        assert e.code == CloseCode.POLICY_VIOLATION
        return
    # only the replacement character can remain, which is well-formed
    for v in params.values():
        v.encode("utf-8")
    with pytest.raises(ProtocolError):
        parse_speaker(params.get("speaker", "\ufffd\u200b"))


# --------------------------------------------------------------------------- fuzz (item 3)

#: lone surrogates, bidi override, NUL, zero-width space, BOM, replacement character
NASTY = ["\udfff", "\ud800", "\u202e", "\x00", "\u200b", "\ufeff", "\ufffd"]
JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False)
    | st.text(st.characters() | st.sampled_from(NASTY), max_size=12),
    lambda kids: (
        st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=6), kids, max_size=3)
    ),
    max_leaves=8,
)
FIELDS = ["type", "sample_rate", "format", "channels", "language", "task", "prompt",
          "vocabulary", "speaker", "speakers"]  # fmt: skip


def _only_protocol_errors(fn: Callable[[str], Any], text: str) -> None:
    try:
        fn(text)
    except ProtocolError as e:
        assert e.code in (CloseCode.UNSUPPORTED_DATA, CloseCode.POLICY_VIOLATION)
        assert e.reason
        e.close_reason.encode("utf-8")
        assert len(e.close_reason.encode("utf-8")) <= 123


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(field=st.sampled_from(FIELDS), value=JSON, base=st.booleans())
def test_fuzz_any_json_value_in_any_start_field_is_a_protocol_error(
    field: str, value: Any, base: bool
) -> None:
    msg = {**START, field: value} if base else {"type": "start", field: value}
    text = json.dumps(msg)
    _only_protocol_errors(parse_start, text)
    _only_protocol_errors(parse_control, text)
    _only_protocol_errors(IngestState().receive_text, text)


@settings(max_examples=300, deadline=None)
@given(value=JSON)
def test_fuzz_any_json_document_is_a_protocol_error(value: Any) -> None:
    for fn in (parse_start, parse_control):
        _only_protocol_errors(fn, json.dumps(value))


@settings(max_examples=300, deadline=None)
@given(text=st.text(max_size=40))
def test_fuzz_any_text_is_a_protocol_error(text: str) -> None:
    for fn in (parse_start, parse_control):
        _only_protocol_errors(fn, text)


# --------------------------------------------------------------------------- records read back


def _final(seq: int, text: str, speaker: str = "") -> dict[str, Any]:
    return Caption(
        "final", "rec", seq, seq, text, float(seq), seq + 0.5, len(text), 10.0, "ep1",
        speaker=speaker,
    ).to_dict()  # fmt: skip


def test_records_with_bad_text_are_skipped_when_read_back(tmp_path: Path) -> None:
    lines = [
        json.dumps(_final(1, "good one")),
        json.dumps(_final(2, "bad \udfff text")),  # json.dumps escapes it: \udfff in the file
        json.dumps(_final(3, "bad name", speaker="B\u200b")),
        json.dumps(_final(4, "unnormalised name", speaker="\uff21lice")),
        json.dumps(_final(5, "good two", speaker="Alice")),
    ]
    (tmp_path / "rec.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    restored = Recorder(tmp_path).load("rec", max_finals=100)
    assert restored is not None
    finals = restored.log.finals()
    assert [c.text for c in finals] == ["good one", "good two"]
    for c in finals:
        c.to_json().encode("utf-8")


def test_a_final_that_cannot_be_written_does_not_stop_the_recording(tmp_path: Path) -> None:
    rec = Recorder(tmp_path)
    good = Caption.from_dict(_final(1, "first"))
    bad = Caption.from_dict({**_final(2, "x"), "text": "bad \udfff"})
    rec.write(good)
    rec.write(bad)  # logged, not raised
    rec.write(Caption.from_dict(_final(3, "third")))
    rec.close([])
    texts = [json.loads(ln)["text"] for ln in (tmp_path / "rec.jsonl").read_text().splitlines()]
    assert texts == ["first", "third"]


# --------------------------------------------------------------------------- a real server


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    config = ServerConfig(port=0, start_timeout_s=5, record_dir=tmp_path_factory.mktemp("rec"))
    with ServerThread(config, FakeWorker(), stream_factory=fake_factory) as s:
        yield s


def _publish(srv: ServerThread, stream: str, frames: int, **fields: Any) -> tuple[int, str]:
    with ingest(srv, stream, token=None) as ws:
        ws.send(start(**fields))
        assert json.loads(ws.recv(timeout=10))["type"] == "ready"
        for _ in range(frames):
            ws.send(b"\x00\x00" * (SR // 10))
        ws.send(json.dumps({"type": "stop"}))
        error = None
        try:
            while True:
                msg = ws.recv(timeout=10)
                if isinstance(msg, str) and json.loads(msg).get("type") == "error":
                    error = json.loads(msg)
        except Exception:  # noqa: BLE001 - the close ends the loop
            pass
        assert ws.close_code is not None
        if error is not None:
            assert error["code"] == ws.close_code
        return ws.close_code, ws.close_reason or ""


def test_a_lone_surrogate_speaker_is_refused_by_the_server(srv: ServerThread) -> None:
    with ingest(srv, "sur", token=None) as ws:
        ws.send(start_raw(f'"speaker": "B{SURROGATE}"'))
        error = expect_close(ws, CloseCode.UNSUPPORTED_DATA)
    assert error is not None and "Unicode" in error["reason"]


def test_a_lone_surrogate_prompt_is_refused_not_a_silent_stream(srv: ServerThread) -> None:
    with ingest(srv, "surp", token=None) as ws:
        ws.send(start_raw(f'"prompt": "x{SURROGATE}"'))
        expect_close(ws, CloseCode.UNSUPPORTED_DATA)


def test_a_look_alike_name_collides_with_the_name(srv: ServerThread) -> None:
    url = ws_url(srv.url("", websocket=True), "ingest", "room", speaker="Alice")
    with connect(url) as first:
        first.send(start())
        assert json.loads(first.recv(timeout=10))["type"] == "ready"
        twin = ws_url(srv.url("", websocket=True), "ingest", "room", speaker="\uff21lice")
        with connect(twin) as ws:
            error = expect_close(ws, CloseCode.POLICY_VIOLATION)
        assert error is not None and "already publishing" in error["reason"]
        with connect(ws_url(srv.url("", websocket=True), "ingest", "room")) as ws:
            ws.send(start(speaker="Alice\u200b"))
            expect_close(ws, CloseCode.UNSUPPORTED_DATA)


def test_an_event_that_cannot_be_encoded_ends_no_viewer_recorder_or_stream(
    srv: ServerThread,
) -> None:
    viewer = Collector(srv, "enc", token=None)
    try:
        code, _ = _publish(srv, "enc", 4, prompt="bad-event")
        assert code == CloseCode.NORMAL_CLOSURE
        assert viewer.wait_for(lambda c: len(c.finals()) >= 3, 10), viewer.events
        assert [e["text"] for e in viewer.finals()] == ["final 0", "final 2", "final 3"]
        assert viewer.close is None and viewer.error is None  # still connected
    finally:
        viewer.stop()
    status, _, body = http_get(srv.url("/streams/enc.srt"))
    assert status == 200 and "final 3" in body
    assert srv.config.record_dir is not None
    lines = (srv.config.record_dir / "enc.jsonl").read_text().splitlines()
    assert [json.loads(x)["text"] for x in lines] == ["final 0", "final 2", "final 3"]


def test_a_stream_whose_decodes_failed_closes_1011_not_stopped(srv: ServerThread) -> None:
    code, reason = _publish(srv, "fails", 2, prompt="decode-fails")
    assert code == CloseCode.INTERNAL_ERROR
    assert "decoding failed" in reason and "blew up" in reason


def test_a_publisher_reset_right_after_start_is_no_internal_error(
    srv: ServerThread, caplog: pytest.LogCaptureFixture
) -> None:
    import contextlib
    import socket
    import struct

    def internal() -> float:
        status, _, body = http_get(srv.url("/metrics"))
        assert status == 200
        key = 'streamcap_refused_total{reason="internal"}'
        return sum(float(x.rsplit(" ", 1)[1]) for x in body.splitlines() if x.startswith(key))

    before = internal()
    for i in range(3):
        with contextlib.suppress(Exception), ingest(srv, f"reset{i}", token=None) as ws:
            ws.send(start(prompt="slow-start"))  # the server takes 0.3 s before its ready
            ws.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            ws.socket.close()  # RST before the ready can be sent
    code, _ = _publish(srv, "after-reset", 1)
    assert code == CloseCode.NORMAL_CLOSURE
    assert internal() == before
    assert not [r for r in caplog.records if r.exc_info], [r.getMessage() for r in caplog.records]


# --------------------------------------------------------------------------- the CLI (item 11)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--port", "99999"], "--port must be 0-65535"),
        (["--port", "-5"], "--port must be 0-65535"),
        (["--port", "0", "--tls-cert", "/nonexistent.pem"], "go together"),
    ],
)
def test_serve_usage_errors_exit_2_before_the_model_loads(args: list[str], message: str) -> None:
    res = subprocess.run(
        [sys.executable, "-m", "streamcap.cli", "serve", *args],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr and "loading" not in res.stderr.lower()
    assert message in res.stderr.strip().splitlines()[-1]
    assert "--host" not in res.stderr.strip().splitlines()[-1]


# --------------------------------------------------------------------------- item 9


def test_subtitles_are_rendered_off_the_event_loop(
    srv: ServerThread, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    from streamcap.server.subtitle_doc import SubtitleDoc

    threads: list[str] = []
    real = SubtitleDoc.render

    def spy(cls: type[SubtitleDoc], *args: Any, **kw: Any) -> SubtitleDoc:
        threads.append(threading.current_thread().name)
        return real(*args, **kw)

    monkeypatch.setattr(SubtitleDoc, "render", classmethod(spy))
    _publish(srv, "render", 2)
    status, ctype, body = http_get(srv.url("/streams/render.srt"))
    assert status == 200 and "final 1" in body and ctype.startswith("application/x-subrip")
    assert threads and threads[0] != "caption-server"  # not the event loop's thread
    assert http_get(srv.url("/streams/nope.srt"))[0] == 404
    status, _, metrics = http_get(srv.url("/metrics"))
    assert status == 200 and 'streamcap_http_requests_total{status="200"}' in metrics


# --------------------------------------------------------------------------- item 5


def test_a_takeover_of_a_dead_connection_takes_no_close_timeout() -> None:
    """The old publisher's path is dead (it changed networks): it never answers our close
    frame, and the new connection waited the whole 10 s close timeout for it."""
    import base64
    import os
    import socket

    from websockets.frames import Frame, Opcode

    config = ServerConfig(port=0, publish_token="p")
    with ServerThread(config, FakeWorker(), stream_factory=fake_factory) as srv:
        dead = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
        key = base64.b64encode(os.urandom(16)).decode()
        dead.sendall(
            f"GET /ingest?stream=t&token=p HTTP/1.1\r\nHost: 127.0.0.1:{srv.port}\r\n"
            "Upgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode()
        )
        head = b""
        while b"\r\n\r\n" not in head:
            head += dead.recv(4096)
        assert head.startswith(b"HTTP/1.1 101")
        dead.sendall(Frame(Opcode.TEXT, start().encode()).serialize(mask=True))
        time.sleep(0.3)  # its start is in; from now on it reads nothing and answers nothing
        t0 = time.monotonic()
        with ingest(srv, "t", token="p") as ws:
            ws.send(start())
            assert json.loads(ws.recv(timeout=30))["type"] == "ready"
        assert time.monotonic() - t0 < 3.0
        dead.close()
