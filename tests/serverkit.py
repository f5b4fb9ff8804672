"""Helpers shared by the caption server tests: real clients on loopback, no mocks."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from streamcap.core.captions import CaptionEvent
from streamcap.models.card import RemotePlacement
from streamcap.runtime.scheduler import Scheduler
from streamcap.server.client import publish, ws_url
from streamcap.server.thread import ServerThread

PUB, VIEW = "pub-secret", "view-secret"
SR = 16000


def words(text: str) -> list[str]:
    return re.sub(r"[^a-z0-9' ]+", " ", text.lower()).split()


def recall(hyp: str, ref: str) -> float:
    """Share of reference words found in the hypothesis (order-free, robust to punctuation)."""
    h = words(hyp)
    ref_words = words(ref)
    return sum(1 for w in ref_words if w in h) / len(ref_words)


def padded(audio: np.ndarray, before: float = 0.3, after: float = 1.0) -> np.ndarray:
    z = np.zeros
    return np.concatenate([z(int(before * SR), np.float32), audio, z(int(after * SR), np.float32)])


def base(srv: ServerThread) -> str:
    return srv.url("", websocket=True)


class Collector:
    """A viewer on its own thread (asyncio client) collecting events of one stream.

    `close` is the server's close frame (code, reason) once the connection has ended."""

    def __init__(
        self,
        srv: ServerThread | str,
        stream: str,
        since: int = 0,
        token: str | None = VIEW,
        **params: Any,
    ) -> None:
        root = srv if isinstance(srv, str) else base(srv)
        self.url = ws_url(root, "captions", stream, since=since, token=token, **params)
        self.events: list[dict[str, Any]] = []
        self.close: tuple[int, str] | None = None
        self.ended = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)
        self.error: BaseException | None = None
        self._thread.start()

    async def _run(self) -> None:
        from websockets.asyncio.client import connect as aconnect

        try:
            async with aconnect(self.url, compression=None) as ws:
                try:
                    async for msg in ws:
                        if isinstance(msg, str):
                            self.events.append(json.loads(msg))
                        if self._stop.is_set():
                            return
                finally:
                    if ws.close_code is not None:
                        self.close = (ws.close_code, ws.close_reason or "")
        except BaseException as e:  # noqa: BLE001 - reported by the test
            self.error = e
        finally:
            self.ended.set()

    def finals(self) -> list[dict[str, Any]]:
        return [e for e in self.events if e["type"] == "final"]

    def text(self) -> str:
        return " ".join(e["text"] for e in self.finals())

    def wait_for(self, pred: Any, timeout: float = 60) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if pred(self):
                return True
            time.sleep(0.05)
        return False

    def stop(self) -> None:
        self._stop.set()


def run_publish(
    srv: ServerThread, stream: str, audio: np.ndarray, speaker: str | None = None, **kw: Any
) -> float:
    url = ws_url(base(srv), "ingest", stream, token=PUB, speaker=speaker)
    return asyncio.run(publish(url, audio, SR, **kw))


def expect_close(ws: ClientConnection, code: int) -> dict[str, Any] | None:
    """Read until the server closes; the error frame before the close names the same code."""
    error = None
    with pytest.raises(ConnectionClosed) as info:
        for _ in range(1000):
            msg = ws.recv(timeout=30)
            if isinstance(msg, str) and json.loads(msg).get("type") == "error":
                error = json.loads(msg)
    assert info.value.rcvd is not None, "closed without a close frame"
    assert info.value.rcvd.code == code, info.value.rcvd
    if error is not None:
        assert error["code"] == code
    return error


def ingest(
    srv: ServerThread,
    stream: str = "bad",
    token: str | None = PUB,
    speaker: str | None = None,
    **kw: Any,
) -> Any:
    return connect(ws_url(base(srv), "ingest", stream, token=token, speaker=speaker), **kw)


START = {"type": "start", "sample_rate": SR, "format": "pcm_s16le", "channels": 1}


def http_get(
    url: str,
    context: ssl.SSLContext | None = None,
    headers: dict[str, str] | None = None,
    timeout: float = 10.0,
) -> tuple[int, str, str]:
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=context) as r:
            return r.status, r.headers.get("Content-Type", ""), r.read().decode("utf-8")
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type", ""), e.read().decode("utf-8")


class ServeProcess:
    """`streamcap serve --port 0 ...` with its stderr collected line by line."""

    def __init__(self, *args: str, ready_timeout: float = 120) -> None:
        cmd = [sys.executable, "-m", "streamcap.cli", "serve", "--port", "0", *args]
        self.proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        self.url = ""
        ready = threading.Event()

        def read() -> None:
            assert self.proc.stderr is not None
            for line in self.proc.stderr:
                self.lines.append(line.rstrip("\n"))
                m = re.search(r"serving on (http://\S+)/", line)
                if m:
                    self.url = m.group(1)
                if line.lstrip().startswith("metrics "):  # the last start-up line
                    ready.set()
            ready.set()

        self._reader = threading.Thread(target=read, daemon=True)
        self._reader.start()
        assert ready.wait(ready_timeout) and self.url, "\n".join(self.lines)

    @property
    def ws(self) -> str:
        return self.url.replace("http://", "ws://")

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        rc = self.proc.wait(timeout)
        self._reader.join(10)
        return rc

    def text(self) -> str:
        return "\n".join(self.lines)


# --------------------------------------------------------------------------- stand-ins
# The server's own logic under test needs no model: these stand in for the worker's streams.

BAD_TEXT = "bad \udfff"


class QuietStream:
    """What a stand-in `LiveStream` does on a pause, at the end and when asked to wait: nothing
    (its captions are out as soon as it is fed). Stand-ins subclass it and write `feed`."""

    def pause(self) -> None:
        pass

    def finish(self) -> None:
        pass

    def wait_idle(self, timeout: float | None = None) -> bool:
        return True


class FakeStream:
    """A stand-in `LiveStream`: every `feed` is one final ("bad" text for the second one,
    if asked), `errors` as a real one keeps them."""

    def __init__(self, on_caption: Callable[[CaptionEvent], None], prompt: str) -> None:
        self.on_caption = on_caption
        self.prompt = prompt
        self.n = 0
        self.errors: list[BaseException] = []

    def feed(self, samples: Any) -> None:
        text = BAD_TEXT if self.n == 1 and "bad-event" in self.prompt else f"final {self.n}"
        self.on_caption(CaptionEvent("final", self.n, text, self.n, self.n + 0.5))
        self.n += 1
        if "decode-fails" in self.prompt:
            self.errors.append(RuntimeError("the decoder blew up"))

    def pause(self) -> None:
        pass

    def finish(self) -> None:
        pass

    def wait_idle(self, timeout: float | None = None) -> bool:
        if "slow-finish" in self.prompt:  # the last finals take a while (a loaded worker)
            time.sleep(min(timeout or 3.0, 3.0))
        return True


class NoModel:
    """The model info of a worker without a model (`runtime.worker_api.ModelInfo`): its
    streams (`FakeStream`) tokenize nothing."""

    spec: Any = None
    multilingual = False
    placement = RemotePlacement("none", "none")
    main = SimpleNamespace(name="none")

    def text_to_ids(self, text: str) -> tuple[int, ...]:
        return ()


class FakeWorker(Scheduler):
    """A worker without a model (its streams are `FakeStream`s, which submit nothing): the
    real scheduler core, so the server reads real, idle books, load and admission."""

    def __init__(self) -> None:
        super().__init__(name="no-model")
        self.engine = NoModel()

    def warm_up(self, language: str | None = None) -> float:
        return 0.0


def fake_factory(stream: str, start: Any, on_caption: Callable[[CaptionEvent], None]) -> Any:
    if "slow-start" in start.prompt:
        time.sleep(0.3)  # on the event loop: the publisher's reset arrives before the ready
    return FakeStream(on_caption, start.prompt)
