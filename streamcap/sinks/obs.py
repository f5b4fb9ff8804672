"""OBS Studio's own closed captions: a stream's captions sent to OBS over obs-websocket, which
writes them into its stream output as CEA-608 (YouTube and Twitch show them as CC).

The protocol is obs-websocket 5 (built into OBS 28 and later; its Tools > WebSocket Server
Settings): the server says Hello (op 0, with a challenge and a salt when it has a password),
the client Identifies (op 1: ``rpcVersion`` 1 and, with a password,
``base64(sha256(base64(sha256(password + salt)) + challenge))``), the server answers
Identified (op 2); then Requests (op 6: ``requestType``, ``requestId``, ``requestData``) get
RequestResponses (op 7: ``requestStatus`` ``result`` and ``code``). ``SendStreamCaption
{captionText}`` works while OBS streams and answers code 501 (output not running) otherwise;
a wrong password closes the socket with 4009.

What is sent, and when, is `streamcap.core.cea608.RollUp608`: 608 screens of 2 or 3 rows of at
most 32 characters, rolled up word by word, finals once, the locked words of partials, paced at
the rate 608 carries. So ``deliver`` only adds a caption to the running text and wakes the
sink's own task, which sends the screens as they fall due: a slow or absent OBS holds up
nothing. The task connects when there is something to send, and after a lost connection again
with a backoff (1 s, doubling to 30 s); text that came while OBS was away is skipped up to
the latest screen (it was never live).

Options (`SinkSpec.options`, from ``serve``'s config): ``password`` (else
``$STREAMCAP_OBS_PASSWORD_<STREAM>``, then ``$STREAMCAP_OBS_PASSWORD``; none: OBS's
authentication is off), ``rows`` (2 or 3), ``partials`` ("0": finals only). The password is
never logged, nor anything that quotes it; the target, a websocket address, is not a secret.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import logging
import os
import time
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI

from streamcap.core.captions import Caption
from streamcap.core.cea608 import RollUp608, RollUpConfig

from .base import SinkError, SinkSpec

__all__ = ["ObsClient", "ObsSink", "check_obs_url", "obs_auth", "obs_password"]

log = logging.getLogger("streamcap.sinks")

#: The environment variable of the password (``_<STREAM>`` after it for one stream's).
PASSWORD_ENV = "STREAMCAP_OBS_PASSWORD"
#: obs-websocket's answer to a request while OBS is not streaming (OutputNotRunning).
NOT_STREAMING = 501
#: obs-websocket's close code for a wrong or missing password.
AUTH_FAILED = 4009
#: Reconnecting: the first wait, and the longest.
BACKOFF_S = (1.0, 30.0)
#: How long a connection, a handshake or a request may take.
TIMEOUT_S = 5.0
#: At shutdown, how long words not yet on screen may take to go out.
CLOSE_WAIT_S = 3.0


def obs_auth(password: str, salt: str, challenge: str) -> str:
    """obs-websocket 5's authentication string for ``password`` and a Hello's salt and
    challenge."""
    secret = base64.b64encode(hashlib.sha256((password + salt).encode()).digest())
    return base64.b64encode(hashlib.sha256(secret + challenge.encode()).digest()).decode()


def check_obs_url(url: str) -> None:
    """A websocket address (``ws://host:port``); ValueError otherwise."""
    parts = urlsplit(url)
    if parts.scheme not in ("ws", "wss") or not parts.hostname or parts.username is not None:
        raise ValueError("is not an OBS websocket address like ws://127.0.0.1:4455")
    try:
        parts.port  # noqa: B018 - a port out of range raises here
    except ValueError:
        raise ValueError("has a port that is not a number from 1 to 65535") from None


def obs_password(spec: SinkSpec, environ: Mapping[str, str]) -> str:
    """The password of ``spec``'s OBS: the stream's own variable, the config file's, the
    common variable; "" for none."""
    own = PASSWORD_ENV + "_" + "".join(c if c.isalnum() else "_" for c in spec.stream.upper())
    return environ.get(own) or spec.option("password") or environ.get(PASSWORD_ENV, "")


class ObsError(SinkError):
    """What went wrong with OBS, said without the password."""


async def _identify(ws: ClientConnection, password: str) -> dict[str, Any]:
    """Hello, Identify, Identified; the Hello's fields."""
    hello = json.loads(await ws.recv())
    if hello.get("op") != 0:
        raise ObsError("the server is not obs-websocket 5 (no Hello)")
    d: dict[str, Any] = hello.get("d", {})
    identify: dict[str, Any] = {"rpcVersion": 1, "eventSubscriptions": 0}
    auth = d.get("authentication")
    if auth:
        if not password:
            raise ObsError(
                f"OBS asks for a password: set ${PASSWORD_ENV} or obs_password in the config file"
            )
        identify["authentication"] = obs_auth(password, str(auth["salt"]), str(auth["challenge"]))
    await ws.send(json.dumps({"op": 1, "d": identify}))
    if json.loads(await ws.recv()).get("op") != 2:
        raise ObsError("OBS did not identify this client")
    return d


class ObsClient:
    """One obs-websocket 5 connection: the handshake and requests, one at a time."""

    def __init__(self, ws: ClientConnection, hello: Mapping[str, Any]) -> None:
        self._ws = ws
        self._next_id = 0
        self.version = str(hello.get("obsWebSocketVersion", "?"))

    @classmethod
    async def open(cls, url: str, password: str) -> ObsClient:
        """Connect and identify; ObsError (without the password) when OBS refuses."""
        ws = await connect(url, open_timeout=TIMEOUT_S, max_size=2**20, compression=None)
        try:
            d = await asyncio.wait_for(_identify(ws, password), TIMEOUT_S)
        except ConnectionClosed as e:
            await ws.close()
            if e.rcvd is not None and e.rcvd.code == AUTH_FAILED:
                raise ObsError("OBS refused the password") from None
            raise
        except BaseException:
            await ws.close()
            raise
        return cls(ws, d)

    async def request(self, request_type: str, data: Mapping[str, Any] | None = None) -> int:
        """Send a request and wait for its answer; its status code (100: success)."""
        return (await self.call(request_type, data))[0]

    async def call(
        self, request_type: str, data: Mapping[str, Any] | None = None
    ) -> tuple[int, dict[str, Any]]:
        """Send a request and wait for its answer: its status code and response data."""
        self._next_id += 1
        msg: dict[str, Any] = {"requestType": request_type, "requestId": str(self._next_id)}
        if data is not None:
            msg["requestData"] = dict(data)
        return await asyncio.wait_for(self._exchange(msg), TIMEOUT_S)

    async def _exchange(self, msg: Mapping[str, Any]) -> tuple[int, dict[str, Any]]:
        await self._ws.send(json.dumps({"op": 6, "d": msg}))
        while True:  # events are not subscribed; skip anything but the answer
            answer = json.loads(await self._ws.recv())
            d = answer.get("d", {})
            if answer.get("op") == 7 and d.get("requestId") == msg["requestId"]:
                code = int(d.get("requestStatus", {}).get("code", 0))
                return code, dict(d.get("responseData") or {})

    async def close(self) -> None:
        await self._ws.close()


class ObsSink:
    """Sends one stream's captions to OBS as 608 screens (see the module docstring)."""

    def __init__(
        self,
        spec: SinkSpec,
        *,
        environ: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        check_obs_url(spec.target)
        rows = spec.option("rows", "2")
        if rows not in ("2", "3"):
            raise ValueError("obs: rows is 2 or 3")
        partials = spec.option("partials", "1") not in ("0", "false", "no", "off")
        self.config = RollUpConfig(rows=int(rows), partials=partials)
        self._name = spec.label
        self._url = spec.target
        self._password = obs_password(spec, os.environ if environ is None else environ)
        self._clock = clock
        self._roll = RollUp608(self.config)
        self._client: ObsClient | None = None
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._backoff = BACKOFF_S[0]
        self._retry_at = -float("inf")
        self._connected_before = False
        self._streaming: bool | None = None
        #: screens OBS took, screens it could not put on air (not streaming), failed sends
        self.sent = 0
        self.not_streaming = 0
        self.failures = 0

    @property
    def name(self) -> str:
        return self._name

    @property
    def wants_partials(self) -> bool:
        return self.config.partials

    async def deliver(self, caption: Caption) -> None:
        self._roll.add(caption)
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name=f"sink {self._name}")
        self._wake.set()

    async def aclose(self) -> None:
        # the last words get a moment to go out (the runner allows a sink a few seconds)
        end = self._clock() + CLOSE_WAIT_S
        while (
            self._task is not None and not self._task.done() and self._roll.waiting
            and self._retry_at <= self._clock() < end  # not while OBS is away
        ):  # fmt: skip
            await asyncio.sleep(0.05)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self._drop()

    # -- the sink's task -------------------------------------------------------------------

    async def _sleep(self, seconds: float | None, wakeable: bool) -> None:
        self._wake.clear()
        if not wakeable:
            await asyncio.sleep(seconds or 0)
            return
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._wake.wait(), seconds)

    async def _run(self) -> None:
        while True:
            now = self._clock()
            wait = self._roll.due(now)
            if wait is None or wait > 0:
                await self._sleep(wait, wakeable=True)
                continue
            if self._client is None:
                if now < self._retry_at:
                    await self._sleep(self._retry_at - now, wakeable=False)
                    continue
                if not await self._connect():
                    continue
            screen = self._roll.take(self._clock())
            if screen is not None:
                await self._send(screen)

    async def _connect(self) -> bool:
        try:
            self._client = await ObsClient.open(self._url, self._password)
        except ObsError as e:
            self._retry(f"OBS at {self._url}: {self._say(e)}", longest=True)
            return False
        except (OSError, asyncio.TimeoutError, InvalidHandshake, InvalidURI, ConnectionClosed) as e:
            self._retry(f"cannot reach OBS at {self._url}: {self._say(e)}")
            return False
        except (ValueError, KeyError, TypeError) as e:  # not obs-websocket's JSON
            self._retry(f"OBS at {self._url} answered what is not obs-websocket 5 ({e!r:.80})")
            return False
        log.info(
            "caption sink %s: connected to OBS at %s (obs-websocket %s)",
            self._name, self._url, self._client.version,
        )  # fmt: skip
        self._backoff = BACKOFF_S[0]
        if self._connected_before:
            self._roll.catch_up()  # what came while OBS was away was never live
        self._connected_before = True
        return True

    async def _send(self, screen: str) -> None:
        assert self._client is not None
        try:
            code = await self._client.request("SendStreamCaption", {"captionText": screen})
        except (OSError, asyncio.TimeoutError, ConnectionClosed, ValueError, TypeError) as e:
            await self._drop()
            self._roll.catch_up()  # the screen in flight is lost: the latest one goes again
            self._retry(f"lost OBS at {self._url}: {self._say(e)}")
            return
        streaming = code != NOT_STREAMING
        if streaming != self._streaming:
            log.info(
                "caption sink %s: %s", self._name,
                "OBS is streaming: captions go into its stream" if streaming else
                "OBS is not streaming: captions go nowhere until it starts (Start Streaming)",
            )  # fmt: skip
            self._streaming = streaming
        if code == 100:
            self.sent += 1
        elif code == NOT_STREAMING:
            self.not_streaming += 1
        else:
            self.failures += 1
            log.warning("caption sink %s: OBS answered code %d to a caption", self._name, code)

    def _retry(self, message: str, *, longest: bool = False) -> None:
        self.failures += 1
        wait = BACKOFF_S[1] if longest else self._backoff
        log.warning("caption sink %s: %s; retrying in %.3g s", self._name, message, wait)
        self._retry_at = self._clock() + wait
        self._backoff = min(self._backoff * 2, BACKOFF_S[1])

    def _say(self, e: BaseException) -> str:
        """An error in words, never with the password in them."""
        text = str(e) or type(e).__name__
        return text.replace(self._password, "***") if self._password else text

    async def _drop(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            with contextlib.suppress(Exception):
                await client.close()
