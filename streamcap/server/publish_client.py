"""A publisher that keeps its stream going (`streamcap publish`): across dropped connections,
server restarts and a full server, without losing the audio it captured.

One connection at a time sends the audio of a `audio.capture.CaptureBuffer`, paced by a
`core.pacing.SendPacer` under the server's flood guard. When the connection ends, the close
says what next (`core.pacing.after_close`): reconnect (with backoff), or stop for good (a wrong
token, a stream taken over by another publisher). A new connection resumes where the server's
``ready`` says its audio begins (`core.resume.resume_position`): what the old server had not
turned into captions is sent again, then what was captured meanwhile. At the source's end the
publisher sends ``stop`` and waits for the close that says every final is out; a drop before
it is one more reconnect. The token travels in the ``Authorization`` header, never in a URL or
a message. `follow_captions` is a viewer for the status line (``--show``).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI

from streamcap.audio.capture import CaptureBuffer
from streamcap.audio.pcm import float_to_pcm
from streamcap.core.constants import SAMPLE_RATE
from streamcap.core.pacing import Backoff, CloseVerdict, SendPacer, after_close
from streamcap.core.resume import Session, resume_position
from streamcap.errors import ReportedError

from .client import ws_url

__all__ = ["PublishRefused", "PublishStatus", "PublishTarget", "Publisher", "follow_captions"]

#: Seconds of audio per frame (what a microphone page sends; the flood guard's rate is 100/s).
FRAME_S = 0.1
#: A connection that lasted this long resets the reconnect backoff.
STEADY_S = 5.0
#: How long to wait for ``ready`` (a takeover waits for the old connection's finals).
READY_TIMEOUT_S = 90.0


@dataclass(frozen=True)
class PublishTarget:
    """Where to publish: the server (``ws://host:port``; ``http(s)://`` is taken as
    ``ws(s)://``), the stream, the publish token (None: the server has none) and the start
    message's optional fields (``language``, ``task``, ``prompt``, ``vocabulary``,
    ``speaker``, ``speakers``: docs/protocol.md, "Ingest")."""

    server: str
    stream: str
    token: str | None = None
    fields: dict[str, Any] = field(default_factory=dict)

    @property
    def base(self) -> str:
        s = self.server.rstrip("/")
        for plain, ws in (("http://", "ws://"), ("https://", "wss://")):
            if s.startswith(plain):
                return ws + s[len(plain) :]
        return s

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}


class PublishRefused(ReportedError):
    """The server refused the stream for a reason that trying again cannot mend."""


@dataclass
class PublishStatus:
    """Where the publisher is, for its status line."""

    state: str = "connecting"  # connecting, connected, reconnecting, stopping, stopped
    sent_s: float = 0.0  # audio sent (each second once, however often it was resent)
    behind_s: float = 0.0  # captured and not yet sent
    lost_s: float = 0.0  # captured and dropped (the buffer overflowed while away)
    resent_s: float = 0.0  # sent again after reconnects, in all
    note: str = ""  # the latest event, for a person
    caption: str = ""  # the stream's latest caption (`follow_captions`)


class Publisher:
    """See the module docstring. `run` returns once the server closed with every final out;
    `PublishRefused` when it will not take the stream. `on_event(line)` hears what happened
    (connected, reconnecting and why, what was sent again)."""

    def __init__(
        self,
        target: PublishTarget,
        audio: CaptureBuffer,
        *,
        pacer: SendPacer | None = None,
        on_event: Callable[[str], None] = lambda line: None,
    ) -> None:
        self.target = target
        self.audio = audio
        self.pacer = pacer or SendPacer()
        self.on_event = on_event
        self.status = PublishStatus()
        self._session: Session | None = None  # the last connection the server said ready to
        self._frame = round(FRAME_S * SAMPLE_RATE)
        self._away = ""  # why the last attempt failed, while no connection works

    def _event(self, state: str, note: str) -> None:
        self.status.state, self.status.note = state, note
        self.on_event(note)

    def refresh(self) -> PublishStatus:
        """The status with the buffer's figures as of now."""
        sent, captured, lost, _ = self.audio.state()
        s = self.status
        s.sent_s = max(s.sent_s, sent / SAMPLE_RATE)
        s.behind_s = (captured - sent) / SAMPLE_RATE
        s.lost_s = lost / SAMPLE_RATE
        return s

    async def run(self) -> None:
        backoff = Backoff()
        while True:
            began = time.monotonic()
            verdict, reason = await self._connection()
            if verdict == "done":
                self._event("stopped", f"stopped: {reason}")
                return
            if verdict == "fatal":
                raise PublishRefused(f"the server refused the stream: {reason}")
            if verdict == "replaced":
                raise PublishRefused(
                    f"another connection took stream {self.target.stream!r} over ({reason})"
                )
            if verdict == "flood":
                self.pacer.flooded()
            if time.monotonic() - began > STEADY_S:
                backoff.reset()
            delay = backoff.next()
            note = f"reconnecting in {delay:g} s: {reason}"
            if reason == self._away:  # the same again (a server still away): said once
                self.status.state, self.status.note = "reconnecting", note
            else:
                self._event("reconnecting", note)
            self._away = reason
            await asyncio.sleep(delay)

    async def _connection(self) -> tuple[CloseVerdict, str]:
        """One connection, from connect to close; its verdict and the reason, for a person."""
        url = ws_url(self.target.base, "ingest", self.target.stream)
        try:
            async with connect(
                url, additional_headers=self.target.headers(), open_timeout=10,
                close_timeout=5, max_size=2**20, compression=None, ping_interval=5,
                ping_timeout=15,
            ) as ws:  # fmt: skip
                return await self._publish(ws)
        except ConnectionClosed as e:
            code = e.rcvd.code if e.rcvd is not None else None
            reason = e.rcvd.reason if e.rcvd is not None else "the connection dropped"
            return after_close(code, reason), reason or f"closed with {code}"
        except InvalidURI as e:
            return "fatal", str(e)
        except (OSError, TimeoutError, InvalidHandshake) as e:
            return "retry", _why(e)

    async def _publish(self, ws: ClientConnection) -> tuple[CloseVerdict, str]:
        start = {"type": "start", "sample_rate": SAMPLE_RATE, "format": "pcm_s16le",
                 "channels": 1, **self.target.fields}  # fmt: skip
        await ws.send(json.dumps(start))
        reply = json.loads(await asyncio.wait_for(ws.recv(), READY_TIMEOUT_S))
        if reply.get("type") == "error":
            reason = str(reply.get("reason", ""))
            return after_close(int(reply.get("code") or 0), reason), reason
        if reply.get("type") != "ready":
            return "fatal", f"the server answered {str(reply)[:80]} to the start message"
        self._resume(reply.get("time"), str(reply.get("epoch") or ""))
        errors: list[tuple[int, str]] = []
        reader = asyncio.create_task(_read_errors(ws, errors))
        try:
            return await self._send(ws, reader, errors)
        finally:
            reader.cancel()

    def _resume(self, stream_time: object, epoch: str) -> None:
        """The server is ready: rewind to where it says its audio begins, say what is resent."""
        at = float(stream_time) if isinstance(stream_time, (int, float)) else None
        sent = self.audio.state()[0]
        position = resume_position(self._session, sent, at, epoch)
        short = self.audio.rewind(position)
        resumed = self.audio.state()[0]
        again = sent - resumed
        first = self._session is None
        self._session = Session(at, resumed, epoch)
        note = "connected" if first else "connected again"
        if again > 0:
            self.status.resent_s += again / SAMPLE_RATE
            note += f"; sending again {again / SAMPLE_RATE:.1f} s the server had not captioned"
        if short > 0:
            note += f" ({short / SAMPLE_RATE:.1f} s of it no longer held)"
        self.pacer.begin(time.monotonic())
        self._away = ""
        self._event("connected", note)

    async def _send(
        self, ws: ClientConnection, reader: asyncio.Task[None], errors: list[tuple[int, str]]
    ) -> tuple[CloseVerdict, str]:
        """Send the audio as the pacer allows; at the source's end, stop and wait for the
        server's close."""
        while not reader.done():
            sent, captured, _, ended = self.audio.state()
            if sent >= captured:
                if ended:
                    return await self._stop(ws, reader, errors)
                await asyncio.sleep(0.02)
                continue
            now = time.monotonic()
            room = round(self.pacer.room(now) * SAMPLE_RATE)
            if room < min(self._frame, captured - sent):
                await asyncio.sleep(max(0.01, self.pacer.wait(now, FRAME_S)))
                continue
            _, samples = self.audio.take(min(self._frame, room))
            await ws.send(float_to_pcm(samples, "pcm_s16le"))
            self.pacer.sent(samples.size / SAMPLE_RATE)
        return _verdict(ws, errors)

    async def _stop(
        self, ws: ClientConnection, reader: asyncio.Task[None], errors: list[tuple[int, str]]
    ) -> tuple[CloseVerdict, str]:
        self._event("stopping", "the source ended: waiting for the last captions")
        await ws.send(json.dumps({"type": "stop"}))
        await reader  # the server closes once every final is out
        verdict, reason = _verdict(ws, errors)
        if verdict == "done":
            return "done", "every caption is out"
        if ws.close_code in (1011, 1013):  # after stop: the finals are late or failed
            return "done", f"the server closed with {ws.close_code}: {reason}"
        return verdict, reason


async def _read_errors(ws: ClientConnection, errors: list[tuple[int, str]]) -> None:
    """Read what the server sends until it closes: its error frames (the full reason, which
    a close frame may cut short)."""
    try:
        async for msg in ws:
            if isinstance(msg, str):
                try:
                    obj = json.loads(msg)
                except ValueError:
                    continue
                if isinstance(obj, dict) and obj.get("type") == "error":
                    errors.append((int(obj.get("code") or 0), str(obj.get("reason", ""))))
    except ConnectionClosed:
        pass


def _verdict(ws: ClientConnection, errors: list[tuple[int, str]]) -> tuple[CloseVerdict, str]:
    code = ws.close_code
    reason = errors[-1][1] if errors else (ws.close_reason or "")
    if code is None or code == 1006:
        return "retry", reason or "the connection dropped"
    return after_close(code, reason), reason or f"closed with {code}"


def _why(e: BaseException) -> str:
    """A connection error in a few words (`ConnectionRefusedError` says the port, ...)."""
    text = " ".join(str(e).split())
    return text[:160] or type(e).__name__


async def follow_captions(
    target: PublishTarget, token: str | None, on_caption: Callable[[str], None]
) -> None:
    """A viewer of the target's stream for a status line: `on_caption(text)` for each caption
    (partials included); reconnects for ever, resuming from its last seq (cancel it to end)."""
    since, epoch = 0, None
    backoff = Backoff()
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    while True:
        url = ws_url(target.base, "captions", target.stream, since=since, epoch=epoch)
        try:
            async with connect(url, additional_headers=headers, compression=None) as ws:
                async for msg in ws:
                    backoff.reset()
                    event = json.loads(msg) if isinstance(msg, str) else {}
                    if event.get("type") in ("partial", "final"):
                        since, epoch = int(event.get("seq", since)), event.get("epoch", epoch)
                        if event.get("text"):
                            on_caption(str(event["text"]))
        except (ConnectionClosed, OSError, TimeoutError, InvalidHandshake, ValueError):
            pass
        await asyncio.sleep(backoff.next())
