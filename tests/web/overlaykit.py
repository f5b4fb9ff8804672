"""The overlay under test without the model: a real caption server on loopback whose streams
play a script of caption events (a recorded run, `overlay_events`, or events written in the
test), real publishers feeding it audio at the pace of speech, and real headless chromium
showing `/overlay`.

What stands in: only the decoding. The server numbers, names (a room's publishers), stores and
sends the events as it does the model's (`hub`, `delivery`, `viewers`), and the overlay gets
them over its WebSocket as in OBS.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import numpy as np
from browserkit import browser, need_chromium

from streamcap.core.captions import CaptionEvent
from streamcap.core.decode_types import WordTiming
from streamcap.server.client import publish, ws_url
from streamcap.server.config import ServerConfig
from streamcap.server.thread import ServerThread

SR = 16000
#: A scene behind the transparent page for screenshots: light left half, dark right half.
SCENE = "html { background: linear-gradient(90deg, #eceff1 0 50%, #263238 50% 100%) !important; }"

#: Scripts the streams play, by name: a publisher names its script in its start message's
#: `prompt` (the field reaches the stream factory unchanged). A list of timed events is played
#: at the pace of the audio (`ScriptedStream`); a queue, event by event as the test puts them
#: in (`StepStream`).
SCRIPTS: dict[str, Sequence[dict[str, Any]] | queue.Queue[dict[str, Any]]] = {}


def caption(ev: dict[str, Any]) -> CaptionEvent:
    """A script's event as the pipeline hands it to the server."""
    text = ev["text"]
    words = tuple(WordTiming(w, a, b, 0.9) for w, a, b in ev.get("words", ()))  # (word, start, end)
    return CaptionEvent(
        ev["type"], ev["segment"], text, ev.get("start", 0.0), ev.get("end", 0.0),
        ev.get("committed_chars", len(text) if ev["type"] == "final" else 0),
        ev.get("latency_ms", 300.0), words=words, speaker=ev.get("speaker", ""),
        tentative=ev.get("tentative", ""),
    )  # fmt: skip


class ScriptedStream:
    """A live stream that emits its script's events as the audio fed reaches each one's time
    (`at`, in stream seconds, scaled by `speed`); `finish` emits the rest."""

    def __init__(
        self, on_caption: Callable[[CaptionEvent], None], events: Sequence[dict[str, Any]],
        speed: float,
    ) -> None:  # fmt: skip
        self.on_caption = on_caption
        self.events = events
        self.speed = speed
        self.fed_s = 0.0
        self.next = 0

    def _emit(self, until: float) -> None:
        while self.next < len(self.events) and self.events[self.next]["at"] <= until:
            ev = self.events[self.next]
            self.next += 1
            self.on_caption(caption(ev))

    def feed(self, samples: Any) -> None:
        self.fed_s += len(samples) / SR
        self._emit(self.fed_s * self.speed)

    def pause(self) -> None:
        pass

    def finish(self) -> None:
        self._emit(math.inf)

    def wait_idle(self, timeout: float | None = None) -> bool:
        return True


class StepStream:
    """A live stream that emits the events a test puts into its queue, at the next audio
    frame (every 0.1 s while its publisher sends)."""

    def __init__(
        self, on_caption: Callable[[CaptionEvent], None], steps: queue.Queue[dict[str, Any]]
    ) -> None:
        self.on_caption = on_caption
        self.steps = steps

    def feed(self, samples: Any) -> None:
        while True:
            try:
                ev = self.steps.get_nowait()
            except queue.Empty:
                return
            self.on_caption(caption(ev))

    def pause(self) -> None:
        pass

    def finish(self) -> None:
        self.feed(())

    def wait_idle(self, timeout: float | None = None) -> bool:
        return True


def scripted_factory(speed: float) -> Callable[..., Any]:
    def make(stream: str, start: Any, on_caption: Callable[[CaptionEvent], None]) -> Any:
        script = SCRIPTS[start.prompt]
        if isinstance(script, queue.Queue):
            return StepStream(on_caption, script)
        return ScriptedStream(on_caption, script, speed)

    return make


@contextmanager
def scripted_server(speed: float = 1.0, **config: Any) -> Iterator[ServerThread]:
    """A caption server whose streams play `SCRIPTS` (no model: `serverkit.FakeWorker`).
    `STREAMCAP_OVERLAY_WEB=DIR` serves the pages from another copy of `web/` (to measure a
    version before a change)."""
    from serverkit import FakeWorker

    web = os.environ.get("STREAMCAP_OVERLAY_WEB")
    if web:
        config.setdefault("web_dir", Path(web))
    cfg = ServerConfig(port=0, admission=False, **config)
    with ServerThread(cfg, FakeWorker(), stream_factory=scripted_factory(speed)) as srv:
        yield srv


def play(
    srv: ServerThread, stream: str, script: str, seconds: float, speaker: str | None = None
) -> threading.Thread:
    """A publisher on its own thread: `seconds` of audio (silence: the script says what was
    said) at real-time pace into `stream`, playing `script`; it stops (every final out) at
    the end."""
    url = ws_url(srv.url("", websocket=True), "ingest", stream, speaker=speaker)
    audio = np.zeros(int(seconds * SR), np.float32)
    fields = {"prompt": script}
    t = threading.Thread(
        target=lambda: asyncio.run(publish(url, audio, SR, start_fields=fields)), daemon=True
    )
    t.start()
    return t


class LivePublisher:
    """A publisher on its own thread that sends silence at real-time pace until the `with`
    ends, then stops as a mic page does (`{"type": "stop"}`, and waits for the server's
    close)."""

    def __init__(
        self, srv: ServerThread, stream: str, script: str, speaker: str | None = None
    ) -> None:
        self.url = ws_url(srv.url("", websocket=True), "ingest", stream, speaker=speaker)
        self.script = script
        self._stop = threading.Event()
        self._stack = ExitStack()

    def __enter__(self) -> LivePublisher:
        from websockets.sync.client import connect

        self.ws = self._stack.enter_context(connect(self.url))
        start = {"type": "start", "sample_rate": SR, "format": "pcm_s16le", "prompt": self.script}
        self.ws.send(json.dumps(start))
        reply = json.loads(self.ws.recv(timeout=10))
        assert reply["type"] == "ready", reply
        self._thread = threading.Thread(target=self._send, daemon=True)
        self._thread.start()
        return self

    def _send(self) -> None:
        frame = bytes(2 * SR // 10)  # 0.1 s of 16-bit silence
        t0 = time.monotonic()
        k = 0
        while not self._stop.is_set():
            self.ws.send(frame)
            k += 1
            self._stop.wait(max(0.0, t0 + k * 0.1 - time.monotonic()))

    def __exit__(self, *exc: object) -> None:
        from websockets.exceptions import ConnectionClosed

        self._stop.set()
        self._thread.join(10)
        with self._stack:
            self.ws.send(json.dumps({"type": "stop"}))
            with contextlib.suppress(ConnectionClosed):
                while True:
                    self.ws.recv(timeout=30)


@contextmanager
def chromium(*args: str) -> Iterator[Any]:
    """Headless Debian chromium (`browserkit.browser`; skips where it is not installed), with
    extra `args`."""
    sync_api = need_chromium()
    with sync_api.sync_playwright() as pw:
        b = browser(pw, *args)
        try:
            yield b
        finally:
            b.close()


#: Installed in an overlay page: after every change of the caption box (a MutationObserver
#: runs before the browser paints it) and every 0.3 s, each line's text and whether it runs
#: past its box (`scrollWidth > clientWidth`: `.line { overflow: hidden }` cuts what does),
#: and how many lines show a name and words of a partial that has none (`under_name`: words
#: nobody named shown under someone's name; the overlay marks whose words are `data-who`).
LAYOUT_PROBE = """() => {
  const box = document.getElementById("box");
  const look = () => {
    const lines = [], clipped = [];
    let widest = 0, under_name = 0;
    for (const el of box.querySelectorAll(".line")) {
      const text = el.textContent.replace(/\\s+/g, " ").trim();
      lines.push(text);
      const span = el.querySelector(":scope > span");
      if (span) widest = Math.max(widest, span.getBoundingClientRect().width / el.clientWidth);
      const unnamed = el.querySelector(".stable:not([data-who]), .partial:not([data-who])");
      if (el.querySelector(".speaker") && unnamed) under_name++;
      if (el.scrollWidth > el.clientWidth) {
        clipped.push({ text, scroll: el.scrollWidth, client: el.clientWidth });
      }
    }
    const named = box.querySelectorAll(".line > span > .speaker:first-child").length;
    return { t: performance.now(), lines, clipped, widest, named, under_name,
             shown: box.style.opacity !== "0" };
  };
  window.renders = [];
  window.polls = [];
  new MutationObserver(() => window.renders.push(look())).observe(box, { childList: true });
  setInterval(() => window.polls.push(look()), 300);
}"""


def seconds_with(renders: list[dict[str, Any]], end_ms: float, key: str) -> float:
    """Wall seconds during which the shown box had `key` (`clipped`, `under_name`): each
    render's state lasts until the next render, the last one until `end_ms`."""
    total = 0.0
    for a, b in zip(renders, [*renders[1:], {"t": end_ms}], strict=True):
        if a[key] and a["shown"]:
            total += (b["t"] - a["t"]) / 1000
    return total
