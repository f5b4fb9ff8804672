"""Long streams (issue 25): a stream's memory stays flat however many finals it has had.

20 000 finals go through a real server on loopback (a publisher, the stream's log, the
recording, a live viewer); the model is replaced by a stand-in stream (one final per audio
frame, with word times) because what is measured here is the server's bookkeeping, not
decoding. Python's allocations (tracemalloc, the whole process) must not grow with the number
of finals once the in-memory window is full, and nothing is lost: a viewer that joins late, one
that resumes from an old seq and a subtitle download each get every final, read back from
the recording.
"""

from __future__ import annotations

import asyncio
import gc
import json
import threading
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import srt
from serverkit import SR, Collector, FakeWorker, base, http_get
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from streamcap.core.captions import CaptionEvent
from streamcap.core.decode_types import WordTiming
from streamcap.server.client import publish, ws_url
from streamcap.server.config import ServerConfig
from streamcap.server.thread import ServerThread

WINDOW = 200
FIRST, MORE = 5_000, 15_000
FRAME = 160  # samples per frame: one final each (_WordyStream)


class _WordyStream:
    """One final per audio frame, with word times as a real final has (a sentence of 12)."""

    def __init__(self, on_caption: Callable[[CaptionEvent], None]) -> None:
        self.on_caption = on_caption
        self.n = 0
        self.errors: list[BaseException] = []

    def feed(self, samples: Any) -> None:
        t = float(self.n)
        words = tuple(
            WordTiming(f"w{k}", t + k * 0.05, t + k * 0.05 + 0.04, 0.9) for k in range(12)
        )
        text = f"final {self.n} " + " ".join(w.word for w in words[2:])
        self.on_caption(CaptionEvent("final", self.n, text, t, t + 0.6, words=words))
        self.n += 1

    def finish(self) -> None:
        pass

    def wait_idle(self, timeout: float | None = None) -> bool:
        return True


def _factory(stream: str, start: Any, on_caption: Callable[[CaptionEvent], None]) -> Any:
    return _WordyStream(on_caption)


def _publish(srv: ServerThread, stream: str, n: int) -> None:
    audio = np.zeros(n * FRAME, dtype=np.float32)
    url = ws_url(base(srv), "ingest", stream)
    # no keepalive pings: tracemalloc slows the process several times over, and on a loaded
    # machine a ping can wait longer than its timeout; keepalive is not what this measures
    asyncio.run(publish(url, audio, SR, frame_s=FRAME / SR, realtime=False, ping_interval=None))


class _Counter:
    """A live viewer that keeps only the count and the last seq of the finals it received
    (keeping the events themselves would be the test's memory, not the server's)."""

    def __init__(self, srv: ServerThread, stream: str) -> None:
        self.finals = 0
        self.last_seq = 0
        self.ordered = True
        self._url = ws_url(base(srv), "captions", stream)
        self._ready = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        assert self._ready.wait(10)

    def _run(self) -> None:
        with connect(self._url, compression=None, ping_interval=None) as ws:
            self._ready.set()
            while not self._stop.is_set():
                try:
                    msg = ws.recv(timeout=0.2)
                except TimeoutError:
                    continue
                except ConnectionClosed:
                    return
                ev = json.loads(msg)
                if ev["type"] == "final":
                    self.ordered &= ev["seq"] > self.last_seq
                    self.finals += 1
                    self.last_seq = ev["seq"]

    def wait(self, n: int, timeout: float = 120) -> bool:
        deadline = threading.Event()
        for _ in range(int(timeout * 20)):
            if self.finals >= n:
                return True
            deadline.wait(0.05)
        return False

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)


def _traced_bytes() -> int:
    """Python memory in use now, the whole process: the server thread and the test's clients
    (the counting viewer keeps nothing, the publisher's audio is freed when it returns)."""
    gc.collect()
    return tracemalloc.get_traced_memory()[0]


@pytest.mark.timeout(600)
def test_twenty_thousand_finals_keep_the_server_flat_and_lose_nothing(tmp_path: Path) -> None:
    config = ServerConfig(
        port=0,
        record_dir=tmp_path,
        recorded_memory_finals=WINDOW,
        burst_s=None,
        max_frame_rate=None,
        ping_interval_s=None,  # see _publish
    )
    assert config.memory_finals == WINDOW
    tracemalloc.start()
    try:
        with ServerThread(config, FakeWorker(), stream_factory=_factory) as srv:
            live = _Counter(srv, "day")
            _publish(srv, "day", FIRST)
            assert live.wait(FIRST), live.finals
            warm = _traced_bytes()
            _publish(srv, "day", MORE)
            assert live.wait(FIRST + MORE), live.finals
            grown = _traced_bytes() - warm
            live.close()
            entry = srv.server.hub.get("day") if srv.server else None
            assert entry is not None and len(entry.log.finals()) == WINDOW

            late = Collector(srv, "day", token=None)  # joins now: the whole day, from disk
            assert late.wait_for(lambda v: len(v.finals()) >= FIRST + MORE, 120)
            back = late.finals()
            late.stop()
            mid = back[FIRST]["seq"]  # resumes from an old seq, long out of memory
            resumed = Collector(srv, "day", since=mid, epoch=back[0]["epoch"], token=None)
            assert resumed.wait_for(lambda v: len(v.finals()) >= MORE - 1, 120)
            again = resumed.finals()
            resumed.stop()
            status, _, body = http_get(srv.url("/streams/day.srt"), timeout=120)
    finally:
        tracemalloc.stop()
    # Each final held in memory is ~3.7 KB of Caption and WordTiming objects: the 5 000 more
    # that a 10 000-final log would keep are ~18 MB; the window keeps the growth to noise.
    assert grown < 1_500_000, f"server memory grew {grown / 1e6:.1f} MB over {MORE} finals"
    assert live.ordered and live.finals == FIRST + MORE
    seqs = [e["seq"] for e in back]
    assert seqs == sorted(set(seqs)) and len(seqs) == FIRST + MORE
    assert [e["text"].split()[:2] for e in back[:2]] == [["final", "0"], ["final", "1"]]
    assert all(len(e["words"]) == 12 for e in back)
    assert [e["seq"] for e in again] == seqs[FIRST + 1 :]
    assert status == 200
    cues = list(srt.parse(body))
    assert len(cues) == FIRST + MORE and cues[0].content.startswith("final 0")
