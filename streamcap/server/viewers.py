"""Caption viewers: each /captions connection is a cursor into its stream's log (`hub.py`).

A sender task sends `log.since(cursor)` whenever the stream wakes it, a reader task drains
what the viewer sends (nothing is expected). A viewer that cannot take one event within the
send timeout is closed (1008) and may resume with `since`; at shutdown the sender sends what
is left and the connection closes with 1001.

A viewer that asks with `status=1` is also told whether anyone publishes on the stream: a
`status` message when it connects and whenever that changes (the stream wakes its viewers
when a publisher starts and when its last one leaves: `delivery.Delivery`). An overlay opened
on a stream nobody publishes on can then say so instead of staying blank. It is asked for,
not sent to every viewer, because a client written before it may take every message for a
caption.

A viewer that asks with `names=1` is sent the stream's names map (`names.py`: a rename of its
speakers) as a `names` message after the captions when it connects with a map set, and again
at each rename, so a page relabels the captions on its screen. Every viewer gets its captions
renamed (`names.renamed`), so one that does not ask still sees the new name on what comes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from urllib.parse import parse_qsl, urlsplit

from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed

from .accept import peer_address
from .close import CloseCode, ProtocolError
from .hub import StreamEntry, Viewer
from .names import names_json, renamed
from .request import resume_cursor
from .services import ViewerServices


async def serve_viewer(
    server: ViewerServices, ws: ServerConnection, stream: str, since: int, epoch: str | None
) -> None:
    """One /captions connection: replay from the resume cursor, then live, until either side
    closes; at shutdown, what is left, then 1001. `server` is what a viewer may ask of its
    server (`services.ViewerServices`)."""
    cfg = server.config
    found = await server.hub.open(stream)  # a recorded stream is read back off the loop
    if cfg.unknown_stream == "reject" and (found is None or not found.started):
        err = ProtocolError(CloseCode.POLICY_VIOLATION, f"unknown stream {stream!r}")
        await server.refuse(ws, err, "unknown_stream", stream)
        return
    if server.hub.viewers >= cfg.max_viewers:
        err = ProtocolError(
            CloseCode.POLICY_VIOLATION, f"server is at its limit of {cfg.max_viewers} viewers"
        )
        await server.refuse(ws, err, "limit", stream)
        return
    entry = server.hub.entry(stream, found)
    viewer = Viewer(resume_cursor(since, epoch, entry.log.epoch, entry.log.last_seq))
    entry.viewers.add(viewer)
    viewer.wake.set()
    done = asyncio.Event()
    server.viewer_done.add(done)
    sender = asyncio.create_task(
        _send_loop(
            server, ws, entry, viewer, peer_address(ws), _wants(ws, "status"), _wants(ws, "names")
        )
    )
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


def _wants(ws: ServerConnection, what: str) -> bool:
    """The viewer asked for `what` messages (`status=1`, `names=1`; the query was checked
    already)."""
    path = ws.request.path if ws.request is not None else ""
    return dict(parse_qsl(urlsplit(path).query)).get(what) == "1"


def status_json(stream: str, publishing: bool, pace: str = "live", behind_s: float = 0.0) -> str:
    """The status message: whether anyone publishes on `stream` now (no `seq`: it is not a
    caption and is never replayed), and, while its captions fall behind (the worker cannot
    keep up: `core.load_shed`), by how much and how its partials give way."""
    msg: dict[str, object] = {"type": "status", "stream": stream, "publishing": publishing}
    if publishing and pace != "live":
        msg.update(behind=True, behind_s=behind_s, partials=pace)
    return json.dumps(msg)


async def _send(
    server: ViewerServices,
    ws: ServerConnection,
    entry: StreamEntry,
    viewer: Viewer,
    data: str | bytes,
) -> str | None:
    """Send one message; "slow" (closed: it could not take it in time) or "gone" if not sent."""
    try:
        await asyncio.wait_for(ws.send(data, text=True), server.config.viewer_send_timeout_s)
    except asyncio.TimeoutError:
        reason = f"viewer too slow; reconnect with since={viewer.cursor}"
        err = ProtocolError(CloseCode.POLICY_VIOLATION, reason)
        await server.refuse(ws, err, "slow_viewer", entry.stream)
        return "slow"
    except ConnectionClosed:
        return "gone"
    return None


async def _send_loop(
    server: ViewerServices,
    ws: ServerConnection,
    entry: StreamEntry,
    viewer: Viewer,
    address: str,
    status: bool = False,
    names: bool = False,
) -> str:
    """Send the log from the viewer's cursor on, whenever woken (a replay from the recording
    comes a chunk at a time, paid for from `address`'s budget), renamed by the stream's names
    map; at shutdown, what is left. With `status`, after the captions, whether anyone
    publishes when the viewer has not been told it yet; with `names`, the names map when it
    changed since the viewer was told (on connect: when one is set)."""
    told: tuple[bool, str] | None = None  # what it was last told: publishing, pace
    told_names = 0  # the names map's version it has (0: none set, nothing to tell)
    while True:
        await viewer.wake.wait()
        viewer.wake.clear()
        batch, recorded_through = await server.replay(entry, viewer.cursor, address)
        for cap in batch:
            try:
                data = renamed(cap, entry.names).to_json().encode("utf-8")
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
            failed = await _send(server, ws, entry, viewer, data)
            if failed:
                return failed
            viewer.cursor = cap.seq
            server.metrics.events_sent.inc()
        if names and recorded_through is None and entry.names_version != told_names:
            told_names = entry.names_version
            failed = await _send(server, ws, entry, viewer, names_json(entry.stream, entry.names))
            if failed:
                return failed
        now = (entry.publishing, entry.pace if entry.publishing else "live")
        if status and recorded_through is None and now != told:
            told = now
            msg = status_json(entry.stream, now[0], now[1], entry.behind_s)
            failed = await _send(server, ws, entry, viewer, msg)
            if failed:
                return failed
        if recorded_through is not None:  # a chunk of the recording: the next one follows
            viewer.cursor = max(viewer.cursor, recorded_through)
            viewer.wake.set()
        elif viewer.closing:
            return "closing"
