"""What the HLS tests share: a server whose streams are stand-ins timed by the audio they get
(no model: the HLS routes are under test, not the captions), a publisher that sends audio at
real time from a thread, and plain HTTP GETs (urllib)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
from serverkit import SR, FakeWorker, QuietStream

from streamcap.core.captions import CaptionEvent
from streamcap.server.client import publish, ws_url
from streamcap.server.config import ServerConfig
from streamcap.server.thread import ServerThread


class AudioTimedStream(QuietStream):
    """A stand-in `LiveStream`: each frame of audio is one final, "Words N.", spanning that
    frame on the stream's clock (its audio seconds), as a real stream's finals do; said by
    `speaker` (a voice label, as `--speakers auto` gives)."""

    def __init__(self, on_caption: Callable[[CaptionEvent], None], speaker: str = "") -> None:
        self.on_caption = on_caption
        self.speaker = speaker
        self.n = 0
        self.audio_s = 0.0

    def feed(self, samples: Any) -> None:
        start = self.audio_s
        self.audio_s += len(samples) / SR
        text = f"Words {self.n}."
        end = self.audio_s - 0.1
        self.on_caption(CaptionEvent("final", self.n, text, start, end, speaker=self.speaker))
        self.n += 1


def factory(stream: str, start: Any, on_caption: Callable[[CaptionEvent], None]) -> Any:
    return AudioTimedStream(on_caption, "Speaker 1" if start.prompt == "labelled" else "")


@contextlib.contextmanager
def hls_server(**kw: Any) -> Iterator[ServerThread]:
    config = ServerConfig(port=0, admission=False, **kw)
    with ServerThread(config, FakeWorker(), stream_factory=factory) as srv:
        yield srv


def publish_in_background(
    srv: ServerThread, stream: str, seconds: float, frame_s: float = 1.0, prompt: str = ""
) -> threading.Thread:
    """Send `seconds` of audio at real time, `frame_s` a frame, from a thread; then stop
    (``prompt="labelled"``: its finals are said by "Speaker 1")."""
    audio = np.full(int(seconds * SR), 0.1, dtype=np.float32)
    url = ws_url(srv.url("", websocket=True), "ingest", stream)
    fields = {"prompt": prompt} if prompt else None
    thread = threading.Thread(
        target=lambda: asyncio.run(publish(url, audio, SR, frame_s=frame_s, start_fields=fields)),
        daemon=True,
    )
    thread.start()
    return thread


def get(url: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], str]:
    """(status, headers with lower-case names, body)."""
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            hdrs = {k.lower(): v for k, v in r.headers.items()}
            return r.status, hdrs, r.read().decode("utf-8")
    except urllib.error.HTTPError as e:
        return e.code, {k.lower(): v for k, v in e.headers.items()}, e.read().decode("utf-8")


def segment_uris(playlist: str) -> list[str]:
    return [line for line in playlist.splitlines() if line and not line.startswith("#")]
