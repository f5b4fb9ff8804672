"""Red-team round 4 (issue 35), sessions that must end: bugs 4 and 5 and the quiet publisher.

A subtitle download whose reader stalls is dropped when its close timeout runs out; a recording
that cannot be written (a full disk, `/dev/full`) never turns a publisher's stop into 1011 nor
holds a takeover or shutdown; and a publisher that stops sending mid-sentence, socket open, gets
its last words as a final within seconds, not at the idle timeout. Real servers on loopback: a
stand-in stream where the model is not what is tested (`recordkit`), the bundled Whisper model
on real speech for the quiet publisher. Each test names the bug it guards against; each failed
before the fix.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from recordkit import LOUD, many, record_server, write_recording
from serverkit import PUB, SR, START, Collector, ingest

from streamcap.audio.pcm import float_to_pcm
from streamcap.server.config import ServerConfig
from streamcap.server.thread import ServerThread

# --------------------------------------------------------------------------- bug 4


def _get_headers(sock: socket.socket) -> tuple[int, bytes]:
    """Read a response's head; returns its Content-Length and the body bytes read with it."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(4096)
        assert chunk, data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    return length, body


def test_a_stalled_subtitle_download_is_dropped_when_its_close_timeout_runs_out(
    tmp_path: Path,
) -> None:
    """Bug 4 (STALL-READER): the documented close timeout (10 s + size at 256 kB/s) was set
    but never applied to a response: a reader that stopped kept its socket, and the body it
    pinned, for as long as it liked (300 s and counting)."""
    write_recording(tmp_path, "stall", many("stall", 3000, text="many words " * 30))
    config = {"subtitle_send_base_s": 1.0, "subtitle_send_rate": 1e9}  # a 1 s close timeout
    with record_server(tmp_path, **config) as srv:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.settimeout(120)
        sock.connect(("127.0.0.1", srv.port))
        host = f"127.0.0.1:{srv.port}"
        sock.sendall(f"GET /streams/stall.srt HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
        length, body = _get_headers(sock)
        assert length > 1_000_000  # far more than the socket buffers hold
        time.sleep(5.0)  # stalled for 5 times the close timeout
        got = len(body)
        sock.settimeout(10)
        with contextlib.suppress(ConnectionResetError, TimeoutError):
            while chunk := sock.recv(1 << 16):
                got += len(chunk)
        sock.close()
    assert got < length, "the stalled reader still got the whole body"


# --------------------------------------------------------------------------- bug 5


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Path]:
    """A record folder on a 64 KB tmpfs that is already full (mounting needs root)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    root = tmp_path / "full"
    root.mkdir()
    cmd = ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(root)]
    res = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {res.stderr.strip()}")
    try:
        with contextlib.suppress(OSError), open(root / "filler", "wb") as f:
            while True:
                f.write(b"\0" * 4096)
                f.flush()
        yield root
    finally:
        subprocess.run(["umount", "-l", str(root)], check=False)


def _stop(ws: Any) -> tuple[int, str]:
    """Send stop, read to the close; (code, reason)."""
    ws.send(json.dumps({"type": "stop"}))
    with contextlib.suppress(Exception):
        while True:
            ws.recv(timeout=30)
    assert ws.close_code is not None
    return ws.close_code, ws.close_reason or ""


def _errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno >= logging.ERROR and r.name.startswith("streamcap")
    ]


def _full_disk_publish(srv: ServerThread, stream: str, frames: int) -> tuple[int, str]:
    viewer = Collector(srv, stream, token=None)
    try:
        with ingest(srv, stream, token=None) as ws:
            ws.send(json.dumps(START))
            assert json.loads(ws.recv(timeout=10))["type"] == "ready"
            for _ in range(frames):
                ws.send(LOUD)
            assert viewer.wait_for(lambda v: len(v.finals()) == frames, 10)  # delivered
            return _stop(ws)
    finally:
        viewer.stop()


def test_a_full_disk_never_turns_a_stop_into_1011(
    full_disk: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Bug 5 (FULL-STOP, REC-FULL): the failed flush stayed in the file's buffer, the close at
    the stream's end raised it again, uncaught: 1011 instead of 1000, and `done` was never set.
    The recording's failure is logged once, not once per event (REC-READONLY)."""
    caplog.set_level(logging.INFO)
    with record_server(full_disk) as srv:
        code, reason = _full_disk_publish(srv, "full", 12)
    assert (code, reason) == (1000, "stopped")
    errors = _errors(caplog)
    assert 1 <= len(errors) <= 2, errors
    assert not [r for r in caplog.records if r.exc_info]


def test_a_recording_that_is_dev_full_never_turns_a_stop_into_1011(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Bug 5 (CORRUPT-devfull): the same through a symlink to /dev/full (no mount needed)."""
    (tmp_path / "devfull.jsonl").symlink_to("/dev/full")
    with record_server(tmp_path) as srv:
        assert _full_disk_publish(srv, "devfull", 6) == (1000, "stopped")
    assert len(_errors(caplog)) <= 2, _errors(caplog)


def test_a_full_disk_holds_neither_a_takeover_nor_the_shutdown(full_disk: Path) -> None:
    """Bug 5 (FULL-TAKEOVER, FULL-SHUTDOWN): the old session's `done` never came, so a takeover
    waited `finish_timeout_s + 5` and was refused, and shutdown waited as long."""
    with record_server(full_disk, publish_token=PUB, finish_timeout_s=30.0) as srv:
        old = ingest(srv, "t", token=PUB)
        old.send(json.dumps(START))
        assert json.loads(old.recv(timeout=10))["type"] == "ready"
        for _ in range(4):
            old.send(LOUD)
        with ingest(srv, "t", token=PUB) as new:
            new.send(json.dumps(START))
            assert json.loads(new.recv(timeout=20))["type"] == "ready"  # not after 35 s
            with contextlib.suppress(Exception):
                while True:
                    old.recv(timeout=10)
            assert old.close_code == 1001, (old.close_code, old.close_reason)
            new.send(LOUD)
            t0 = time.monotonic()
            srv.stop()  # with a live publisher on the full disk
            assert time.monotonic() - t0 < srv.config.finish_timeout_s  # not it + 5 s
            with contextlib.suppress(Exception):
                while True:
                    new.recv(timeout=10)
            assert new.close_code == 1001


# --------------------------------------------------------------------------- the quiet publisher


@pytest.mark.model
def test_a_publisher_that_goes_quiet_mid_sentence_gets_its_final_in_seconds(
    worker: Any, speech: dict[str, Any]
) -> None:
    """Concern (MID-IDLE): a publisher that stopped sending mid-utterance, socket open, left its
    last words a partial until the idle timeout closed it (30 s). Now a few seconds without
    audio end the utterance, the publisher stays connected, and it goes on when audio comes."""
    jfk = speech["en_real_jfk"]
    cut = int(6.8 * SR)  # inside "what your country can do for you"
    frame = SR // 10
    config = ServerConfig(port=0, idle_timeout_s=120.0)
    with ServerThread(config, worker) as srv:
        viewer = Collector(srv, "quiet", token=None)
        with ingest(srv, "quiet", token=None) as ws:
            ws.send(json.dumps(START))
            assert json.loads(ws.recv(timeout=10))["type"] == "ready"
            t0 = time.monotonic()
            for k, i in enumerate(range(0, cut, frame)):
                time.sleep(max(0.0, t0 + k * 0.1 - time.monotonic()))
                ws.send(float_to_pcm(jfk[i : min(cut, i + frame)], "pcm_s16le"))
            # silent, socket open: the final is out long before the idle timeout (on a loaded
            # machine the decode itself may take a while)
            assert viewer.wait_for(lambda v: "country" in v.text().lower(), 60), viewer.events
            assert ws.close_code is None  # still connected: not closed as idle
            n = len(viewer.finals())
            rest = np.concatenate([jfk[cut:], np.zeros(SR, np.float32)])
            t0 = time.monotonic()
            for k, i in enumerate(range(0, len(rest), frame)):
                time.sleep(max(0.0, t0 + k * 0.1 - time.monotonic()))
                ws.send(float_to_pcm(rest[i : i + frame], "pcm_s16le"))
            assert _stop(ws) == (1000, "stopped")
        assert viewer.wait_for(lambda v: len(v.finals()) > n, 30), viewer.events
        times = [(e["start"], e["end"]) for e in viewer.finals()]
        viewer.stop()
    assert all(a <= b for a, b in times) and times == sorted(times)
