"""Recordings as `--record DIR` writes them (or broken on purpose), and what the tests that
read them back through a real server need: a server with a stand-in stream (no model), a
viewer from any loopback address that reads JSON as strictly as a browser, a count of the
recorded lines the server parses."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from serverkit import FakeWorker, base
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from streamcap.core.captions import Caption, CaptionEvent
from streamcap.core.decode_types import WordTiming
from streamcap.server.client import ws_url
from streamcap.server.config import ServerConfig
from streamcap.server.thread import ServerThread

EPOCH = "ep1"


def final(
    stream: str,
    seq: int,
    *,
    text: str | None = None,
    words: int = 0,
    epoch: str = EPOCH,
    speaker: str = "",
) -> Caption:
    """The `seq`-th final of a recording: one second each, `words` timed words."""
    t = float(seq)
    timed = tuple(WordTiming(f"w{k}", t + k * 0.05, t + k * 0.05 + 0.04, 0.9) for k in range(words))
    body = text if text is not None else f"final {seq}"
    if timed:
        body = " ".join([body, *(w.word for w in timed)])
    return Caption(
        "final", stream, seq, seq, body, t, t + 0.9, len(body), 120.0, epoch,
        words=timed, speaker=speaker,
    )  # fmt: skip


def write_recording(
    root: Path,
    stream: str,
    lines: Iterable[Caption | dict[str, Any] | str],
    *,
    epoch: str = EPOCH,
    reserved: Any = None,
) -> Path:
    """`root/<stream>.jsonl` with one line per item (a Caption as the recorder writes it, a dict
    as `json.dumps` writes it, NaN included, or a raw line), and its `.seq.json`."""
    path = root / f"{stream}.jsonl"
    last = 0
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for item in lines:
            if isinstance(item, Caption):
                last = max(last, item.seq)
                f.write(item.to_json() + "\n")
            elif isinstance(item, dict):
                f.write(json.dumps(item, ensure_ascii=False) + "\n")
            else:
                f.write(item + "\n")
    seq = {"epoch": epoch, "reserved": last if reserved is None else reserved}
    (root / f"{stream}.seq.json").write_text(json.dumps(seq), encoding="utf-8")
    return path


def many(stream: str, n: int, words: int = 0, text: str | None = None) -> Iterator[Caption]:
    return (final(stream, i, words=words, text=text) for i in range(1, n + 1))


def count_parses(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the recorded lines the server turns into captions (`Caption.from_dict`), in any
    thread, from now on: `count[0]`."""
    count = [0]
    real = Caption.from_dict.__func__  # type: ignore[attr-defined]

    def counted(cls: type[Caption], d: Any) -> Caption:
        count[0] += 1
        return real(cls, d)

    monkeypatch.setattr(Caption, "from_dict", classmethod(counted))
    return count


LOUD = np.full(1600, 16384, dtype=np.int16).tobytes()
QUIET = bytes(3200)


class LiveStandIn:
    """A stand-in `LiveStream`: a frame with sound ends the open segment with its final, a
    silent frame is a partial of it."""

    def __init__(self, on_caption: Callable[[CaptionEvent], None]) -> None:
        self.on_caption = on_caption
        self.k = 0
        self.errors: list[BaseException] = []

    def feed(self, samples: Any) -> None:
        t = float(self.k)
        if np.any(samples):
            self.on_caption(CaptionEvent("final", self.k, f"final {self.k}.", t, t + 0.5))
            self.k += 1
        else:
            self.on_caption(CaptionEvent("partial", self.k, f"partial {self.k}", t, t + 0.3))

    def finish(self) -> None:
        pass

    def wait_idle(self, timeout: float | None = None) -> bool:
        return True


@contextlib.contextmanager
def record_server(root: Path, **kw: Any) -> Iterator[ServerThread]:
    config = ServerConfig(port=0, record_dir=root, **kw)

    def factory(stream: str, start: Any, on_caption: Callable[[CaptionEvent], None]) -> Any:
        return LiveStandIn(on_caption)

    with ServerThread(config, FakeWorker(), stream_factory=factory) as srv:
        yield srv


def strict_json(msg: str | bytes) -> dict[str, Any]:
    """JSON as a browser's `JSON.parse` reads it: no NaN or Infinity."""

    def refuse(token: str) -> Any:
        raise ValueError(f"not JSON: {token}")

    obj: dict[str, Any] = json.loads(msg, parse_constant=refuse)
    return obj


class Viewer:
    """A /captions connection from the loopback address `source`, reading on its own thread
    (strict JSON)."""

    def __init__(
        self, srv: ServerThread, stream: str, *, since: int = 0, epoch: str | None = None,
        source: str = "127.0.0.1",
    ) -> None:  # fmt: skip
        sock = socket.create_connection(("127.0.0.1", srv.port), source_address=(source, 0))
        url = ws_url(base(srv), "captions", stream, since=since, epoch=epoch)
        self.ws = connect(url, sock=sock, compression=None, legacy=True)
        self.events: list[dict[str, Any]] = []
        self.closed: tuple[int, str] | None = None
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            for msg in self.ws:
                self.events.append(strict_json(msg))
        except ConnectionClosed:
            pass
        if self.ws.close_code is not None:
            self.closed = (self.ws.close_code, self.ws.close_reason or "")

    def finals(self) -> list[dict[str, Any]]:
        return [e for e in self.events if e["type"] == "final"]

    def wait(self, finals: int, timeout: float = 60) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if len(self.finals()) >= finals or self.closed is not None:
                break
            time.sleep(0.02)
        return len(self.finals()) >= finals

    def close(self) -> None:
        self.ws.close()
        self._thread.join(10)


def settled(count: list[int], quiet_s: float = 1.0, timeout: float = 60) -> int:
    """`count[0]` once it has not moved for `quiet_s` (reads still running in threads end)."""
    deadline = time.monotonic() + timeout
    last, since = count[0], time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.1)
        if count[0] != last:
            last, since = count[0], time.monotonic()
        elif time.monotonic() - since >= quiet_s:
            break
    return last
