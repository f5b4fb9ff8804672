"""A small asyncio client of the wire protocol: publish audio, watch captions.

Used by `streamcap demo`, `scripts/load_test.py` and the tests; also a reference for anyone
writing their own client (docs/protocol.md has the 10-line version).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Any
from urllib.parse import urlencode

import numpy as np
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from streamcap.audio.pcm import float_to_pcm

__all__ = ["PublishError", "publish", "watch", "ws_url"]


def ws_url(base: str, route: str, stream: str, **params: Any) -> str:
    """`base` like `ws://127.0.0.1:8765`; None-valued params are left out."""
    q = {"stream": stream, **{k: v for k, v in params.items() if v is not None}}
    return f"{base.rstrip('/')}/{route}?{urlencode(q)}"


class PublishError(RuntimeError):
    """The server refused the stream or closed it with an error."""

    def __init__(self, code: int | None, reason: str) -> None:
        super().__init__(f"{code}: {reason}")
        self.code = code
        self.reason = reason


async def publish(
    url: str,
    audio: np.ndarray,
    sample_rate: int,
    *,
    fmt: str = "pcm_s16le",
    frame_s: float = 0.1,
    realtime: bool = True,
    language: str | None = None,
    stop: bool = True,
    on_frame: Callable[[float], None] | None = None,
    start_fields: dict[str, Any] | None = None,
    **connect_kwargs: Any,
) -> float:
    """Send mono float `audio` as a live stream; returns the monotonic time the last frame left.

    `start_fields` go into the start message. With `realtime`, frame k is sent at
    `t0 + k * frame_s` (like a microphone). With `stop`, sends
    `{"type":"stop"}` and waits for the server's normal close, which comes after every final.
    """
    async with connect(url, max_size=None, compression=None, **connect_kwargs) as ws:
        start = {"type": "start", "sample_rate": sample_rate, "format": fmt, "channels": 1}
        if language is not None:
            start["language"] = language
        start.update(start_fields or {})  # e.g. speaker, prompt, vocabulary, task
        try:
            await ws.send(json.dumps(start))
            reply = json.loads(await ws.recv())
        except ConnectionClosed as e:  # refused before our start arrived (e.g. 1013 full)
            code = e.rcvd.code if e.rcvd is not None else None
            raise PublishError(code, e.rcvd.reason if e.rcvd is not None else str(e)) from None
        if reply.get("type") != "ready":
            raise PublishError(reply.get("code"), str(reply.get("reason", reply)))
        step = max(1, int(round(frame_s * sample_rate)))
        t0 = time.monotonic()
        last = t0
        for k, i in enumerate(range(0, len(audio), step)):
            if realtime:
                delay = t0 + k * frame_s - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
            await ws.send(float_to_pcm(audio[i : i + step], fmt))
            last = time.monotonic()
            if on_frame is not None:
                on_frame((i + step) / sample_rate)
        if stop:
            await ws.send(json.dumps({"type": "stop"}))
            await _wait_closed(ws)
        return last


async def _wait_closed(ws: ClientConnection) -> None:
    try:
        async for msg in ws:
            if isinstance(msg, str):
                obj = json.loads(msg)
                if obj.get("type") == "error":
                    raise PublishError(obj.get("code"), str(obj.get("reason")))
    except ConnectionClosed:
        pass  # an error close without an error frame: told below by its code
    finally:
        await ws.wait_closed()
    if ws.close_code not in (1000, None):
        raise PublishError(ws.close_code, ws.close_reason or "")


async def watch(url: str, **connect_kwargs: Any) -> AsyncIterator[dict[str, Any]]:
    """Caption events of one viewer connection, as dicts, until the server closes it."""
    async with connect(url, compression=None, **connect_kwargs) as ws:
        async for msg in ws:
            if isinstance(msg, str):
                yield json.loads(msg)
