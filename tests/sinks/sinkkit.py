"""What the caption-sink tests share: a real HTTP receiver on loopback that plays YouTube's or
Zoom's caption ingestion (records every request; can fail the first ones with 500, answer a
seq), a listening socket that never answers, and a stand-in stream for a real server.

YouTube Live and Zoom cannot be reached from here (no network beyond this machine, and their
caption URLs belong to a live broadcast or meeting): the receiver checks what their documents
say a request must be, nothing more.
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from serverkit import QuietStream

from streamcap.core.captions import CaptionEvent
from streamcap.server.client import ws_url
from streamcap.server.thread import ServerThread

SR = 16000
START = {"type": "start", "sample_rate": SR, "format": "pcm_s16le", "channels": 1}
FRAME = bytes(2 * SR // 10)  # 0.1 s: the stand-in stream makes one final of each frame
#: The part of a caption URL that is the key: it must never reach a log.
SECRET = "sig-Zx81qTopSecretKey"


@dataclass
class Seen:
    """One request the receiver got."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes
    at: float = field(default_factory=time.monotonic)

    @property
    def seq(self) -> int:
        return int(self.query["seq"][0])


class Receiver:
    """A loopback HTTP server standing in for a caption service (see the module docstring).
    ``fail_first``: the first N POSTs get 500; ``last_seq``: what GET .../seq answers
    (Zoom's; None: 404)."""

    def __init__(self, fail_first: int = 0, last_seq: int | None = None) -> None:
        self.seen: list[Seen] = []
        self.fail_first = fail_first
        self.last_seq = last_seq
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # quiet
                pass

            def _record(self) -> Seen:
                parts = urlsplit(self.path)
                n = int(self.headers.get("Content-Length") or 0)
                seen = Seen(
                    self.command, parts.path, parse_qs(parts.query, keep_blank_values=True),
                    {k.lower(): v for k, v in self.headers.items()}, self.rfile.read(n),
                )  # fmt: skip
                with outer.lock:
                    outer.seen.append(seen)
                return seen

            def _send(self, status: int, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self) -> None:
                self._record()
                with outer.lock:
                    posts = sum(1 for s in outer.seen if s.method == "POST")
                if posts <= outer.fail_first:
                    self._send(500, b"try again")
                else:  # YouTube answers the server's time
                    self._send(200, time.strftime("%Y-%m-%dT%H:%M:%S.000").encode())

            def do_GET(self) -> None:
                self._record()
                if self.path.split("?")[0].endswith("/seq") and outer.last_seq is not None:
                    self._send(200, str(outer.last_seq).encode())
                else:
                    self._send(404, b"no")

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def url(self, path: str = "/closedcaption", query: str = f"cid=abc&sig={SECRET}") -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}{path}?{query}"

    def posts(self) -> list[Seen]:
        with self.lock:
            return [s for s in self.seen if s.method == "POST"]

    def wait_posts(self, n: int, timeout: float = 20) -> list[Seen]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and len(self.posts()) < n:
            time.sleep(0.02)
        return self.posts()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@contextlib.contextmanager
def receiver(**kw: Any) -> Iterator[Receiver]:
    r = Receiver(**kw)
    try:
        yield r
    finally:
        r.close()


@contextlib.contextmanager
def silent_port() -> Iterator[str]:
    """A URL on loopback that takes connections (the kernel's backlog) and never answers:
    a service that hangs."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/closedcaption?sig={SECRET}"
    finally:
        sock.close()


class TimedStream(QuietStream):
    """A stand-in `LiveStream`: every `feed` is one final "final N." of one second of the
    stream's time (its speaker "Speaker 1"/"Speaker 2" in turn when `labelled`), and a silent
    frame after a loud one nothing."""

    def __init__(self, on_caption: Callable[[CaptionEvent], None], labelled: bool) -> None:
        self.on_caption = on_caption
        self.labelled = labelled
        self.n = 0

    def feed(self, samples: Any) -> None:
        who = f"Speaker {self.n % 2 + 1}" if self.labelled else ""
        t = float(self.n)
        self.on_caption(CaptionEvent("final", self.n, f"final {self.n}.", t, t + 0.8, speaker=who))
        self.n += 1


def timed_factory(stream: str, start: Any, on_caption: Callable[[CaptionEvent], None]) -> Any:
    return TimedStream(on_caption, labelled="labelled" in (start.prompt or ""))


def ingest_url(srv: ServerThread, stream: str, token: str | None = None) -> str:
    return ws_url(srv.url("", websocket=True), "ingest", stream, token=token)


class CapturedLogs(logging.Handler):
    """Every log record of every logger, formatted with its traceback (to look for secrets)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []
        self.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))

    def text(self) -> str:
        return "\n".join(self.lines)


@contextlib.contextmanager
def all_logs() -> Iterator[CapturedLogs]:
    """Capture every logger at DEBUG while the block runs."""
    root = logging.getLogger()
    handler = CapturedLogs()
    old = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        root.setLevel(old)


def start_json(prompt: str = "") -> str:
    return json.dumps({**START, "prompt": prompt} if prompt else START)


class TimedViewer:
    """A viewer of one stream on its own thread that notes when each event came (monotonic)."""

    def __init__(self, srv: ServerThread, stream: str) -> None:
        self.url = ws_url(srv.url("", websocket=True), "captions", stream, since=0)
        self.events: list[tuple[float, dict[str, Any]]] = []
        self.ws: Any = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()
        assert self._ready.wait(10) and self.ws is not None, "the viewer did not connect"

    def _read(self) -> None:
        from websockets.sync.client import connect

        with contextlib.suppress(Exception), connect(self.url, compression=None) as ws:
            self.ws = ws
            self._ready.set()
            for msg in ws:
                self.events.append((time.monotonic(), json.loads(msg)))

    def finals(self) -> list[tuple[float, dict[str, Any]]]:
        return [(t, e) for t, e in self.events if e.get("type") == "final"]

    def wait_finals(self, n: int, timeout: float = 20) -> list[tuple[float, dict[str, Any]]]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and len(self.finals()) < n:
            time.sleep(0.002)
        return self.finals()

    def close(self) -> None:
        self.ws.close()
        self._thread.join(5)
