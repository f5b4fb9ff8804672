"""Caption viewers: each /captions connection is a cursor into its stream's log (`hub.py`).

A sender task sends `log.since(cursor)` whenever the stream wakes it, a reader task drains
what the viewer sends (nothing is expected). A viewer that cannot take one event within the
send timeout is closed (1008) and may resume with `since`; at shutdown the sender sends what
is left and the connection closes with 1001.
"""

from __future__ import annotations

import asyncio
import contextlib

from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed

from .close import CloseCode, ProtocolError
from .hub import StreamEntry, Viewer
from .request import resume_cursor
from .services import ViewerServices


async def serve_viewer(
    server: ViewerServices, ws: ServerConnection, stream: str, since: int, epoch: str | None
) -> None:
    """One /captions connection: replay from the resume cursor, then live, until either side
    closes; at shutdown, what is left, then 1001. `server` is what a viewer may ask of its
    server (`services.ViewerServices`)."""
    cfg = server.config
    entry = server.hub.get(stream)
    if cfg.unknown_stream == "reject" and (entry is None or not entry.started):
        err = ProtocolError(CloseCode.POLICY_VIOLATION, f"unknown stream {stream!r}")
        await server.refuse(ws, err, "unknown_stream", stream)
        return
    if server.hub.viewers >= cfg.max_viewers:
        err = ProtocolError(
            CloseCode.POLICY_VIOLATION, f"server is at its limit of {cfg.max_viewers} viewers"
        )
        await server.refuse(ws, err, "limit", stream)
        return
    entry = server.hub.entry(stream)
    viewer = Viewer(resume_cursor(since, epoch, entry.log.epoch, entry.log.last_seq))
    entry.viewers.add(viewer)
    viewer.wake.set()
    done = asyncio.Event()
    server.viewer_done.add(done)
    sender = asyncio.create_task(_send_loop(server, ws, entry, viewer))
    reader = asyncio.create_task(_drain(ws))
    try:
        await asyncio.wait({sender, reader}, return_when=asyncio.FIRST_COMPLETED)
        if sender.done() and not sender.cancelled() and sender.result() == "closing":
            with contextlib.suppress(ConnectionClosed):
                await ws.close(CloseCode.GOING_AWAY, "server shutting down")
    finally:
        for t in (sender, reader):
            t.cancel()
        await asyncio.gather(sender, reader, return_exceptions=True)
        entry.viewers.discard(viewer)
        server.hub.release(entry)
        server.viewer_done.discard(done)
        done.set()


async def _drain(ws: ServerConnection) -> None:
    """Viewers have nothing to say; read (and ignore) until the connection closes."""
    try:
        async for _ in ws:
            pass
    except ConnectionClosed:
        pass


async def _send_loop(
    server: ViewerServices, ws: ServerConnection, entry: StreamEntry, viewer: Viewer
) -> str:
    """Send the log from the viewer's cursor on, whenever woken; at shutdown, what is left."""
    timeout = server.config.viewer_send_timeout_s
    while True:
        await viewer.wake.wait()
        viewer.wake.clear()
        for cap in await server.replay(entry, viewer.cursor):
            try:
                data = cap.to_json().encode("utf-8")
            except Exception:  # one event that cannot be sent never ends the viewer
                server.rlog.error(
                    "event_encode",
                    "stream %s: event seq %d cannot be encoded; viewers skip it",
                    entry.stream,
                    cap.seq,
                    exc_info=True,
                )
                viewer.cursor = cap.seq
                continue
            try:
                await asyncio.wait_for(ws.send(data, text=True), timeout)
            except asyncio.TimeoutError:
                reason = f"viewer too slow; reconnect with since={viewer.cursor}"
                err = ProtocolError(CloseCode.POLICY_VIOLATION, reason)
                await server.refuse(ws, err, "slow_viewer", entry.stream)
                return "slow"
            except ConnectionClosed:
                return "gone"
            viewer.cursor = cap.seq
            server.metrics.events_sent.inc()
        if viewer.closing:
            return "closing"
