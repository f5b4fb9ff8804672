"""What the rename tests share: a stand-in stream whose finals carry voice labels, a publisher
that sends one final per frame, and plain HTTP calls (urllib) to `/streams/ID/names`."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

from serverkit import PUB, SR, START, QuietStream, ingest

from streamcap.core.captions import CaptionEvent
from streamcap.server.thread import ServerThread

FRAME = bytes(2 * SR // 10)  # 0.1 s of silence: the stand-in stream makes one final of it


class LabelledStream(QuietStream):
    """A stand-in `LiveStream`: every `feed` is one final, its voice label "Speaker 1" and
    "Speaker 2" in turn (as `--speakers auto` labels a meeting)."""

    def __init__(self, on_caption: Callable[[CaptionEvent], None]) -> None:
        self.on_caption = on_caption
        self.n = 0

    def feed(self, samples: Any) -> None:
        who = f"Speaker {self.n % 2 + 1}"
        self.on_caption(
            CaptionEvent("final", self.n, f"final {self.n}", self.n, self.n + 0.5, speaker=who)
        )
        self.n += 1


def labelled_factory(stream: str, start: Any, on_caption: Callable[[CaptionEvent], None]) -> Any:
    return LabelledStream(on_caption)


def publish_finals(srv: ServerThread, stream: str, n: int, token: str | None = PUB) -> None:
    """A publisher that sends `n` frames (one final each), then stops."""
    with ingest(srv, stream, token=token) as ws:
        ws.send(json.dumps(START))
        assert json.loads(ws.recv(timeout=10))["type"] == "ready"
        for _ in range(n):
            ws.send(FRAME)
        ws.send(json.dumps({"type": "stop"}))
        for _ in ws:  # the server closes once every final is out
            pass


def call(
    srv: ServerThread | str,
    stream: str,
    body: object = None,
    *,
    method: str | None = None,
    token: str | None = PUB,
    headers: dict[str, str] | None = None,
    raw: bytes | None = None,
) -> tuple[int, Any]:
    """`POST` (a body) or `GET` (none) `/streams/STREAM/names`: (status, JSON or text)."""
    root = srv if isinstance(srv, str) else srv.url("")
    data = raw if raw is not None else None if body is None else json.dumps(body).encode()
    h = {"Content-Type": "application/json", **(headers or {})}
    if token is not None:
        h["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(f"{root}/streams/{stream}/names", data=data, headers=h)
    if method:
        req.method = method
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        text = e.read().decode()
        return e.code, text
