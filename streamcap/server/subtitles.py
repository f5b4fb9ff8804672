"""`/streams/<id>.srt|.vtt|.txt|.md`: a stream's subtitle file (or its plain transcript, or
its minutes), made off the event loop, kept as the stream's finals grow, paced per client
address, and let go of when its reader stalls.

Its own piece because it is the one HTTP response that costs real work and real bandwidth:
10 000 finals (older ones read back from the recording) take a while to render, and a looping
downloader of a large file took the CPU from the captions (issue 21; red-team round 4, bug 2).
So the file of a stream is made once in a worker thread and kept per state of its finals
(partials change nothing in it), a new final's cues are appended to it (`subtitle_doc`), and
concurrent and repeated downloads of one state share it. Downloads spend a byte budget per
address and in all (`bucket.ByteBudget`, shared with replays from recordings), checked
*before* any work: a refused download (429) costs nothing. A response must be taken within its
close timeout (`ServerConfig.subtitle_send_base_s` plus its size at `subtitle_send_rate`), or
its socket is dropped: a reader that stalls lets go of the body it pinned (bug 4).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import time
from collections.abc import Awaitable
from http import HTTPStatus
from urllib.parse import parse_qsl, urlsplit

from websockets.asyncio.server import ServerConnection
from websockets.http11 import Request, Response

from streamcap.core.captions import Caption
from streamcap.core.speaker_names import renamed

from . import routes
from .accept import peer_address
from .config import ServerConfig
from .delivery import Delivery
from .hub import Hub, StreamEntry
from .refusal import Refusals
from .request import check_token, extract_token
from .subtitle_doc import SubtitleDoc

#: Subtitle files kept (per stream and kind, for the finals they were made from): at most this
#: many, and this many bytes in all, the least recently made dropped first. Enough for every
#: stream a server keeps (`--retain-streams`) in both kinds: a client cycling through more
#: streams than a smaller cache holds made each of its downloads a render.
SUBTITLE_CACHE_SIZE = 512
SUBTITLE_CACHE_BYTES = 256 * 2**20

#: ((stream, kind) -> (epoch, newest final's seq, names map) it was made for, the file being
#: made)
_State = tuple[str, int, tuple[tuple[str, str], ...]]
_Made = dict[tuple[str, str], tuple[_State, "asyncio.Task[SubtitleDoc]"]]


class SubtitleDownloads:
    """Answers subtitle requests (`response`); a download over its budget is refused (429)."""

    def __init__(
        self, config: ServerConfig, hub: Hub, delivery: Delivery, refusals: Refusals
    ) -> None:
        self.config = config
        self.hub = hub
        self.delivery = delivery
        self.refusals = refusals
        self._made: _Made = {}

    def response(
        self, stream: str, kind: str, request: Request, connection: ServerConnection
    ) -> Response | Awaitable[Response]:
        params = dict(parse_qsl(urlsplit(request.path).query))
        if not check_token(self.config.view_token, extract_token(params, request.headers.get)):
            return routes.text(HTTPStatus.UNAUTHORIZED, "missing or wrong view token")
        # Before any work: the last file made for this stream is what this one will cost
        # (nothing known yet: the budget must not be spent out).
        made = self._made.get((stream, kind))
        last = made[1] if made is not None and made[1].done() else None
        known = last is not None and not last.cancelled() and last.exception() is None
        size = len(last.result().body) if last is not None and known else 1
        refused = self._refusal(peer_address(connection), size)
        if refused is not None:
            return refused
        return self._send(stream, kind, connection)

    async def _send(self, stream: str, kind: str, connection: ServerConnection) -> Response:
        entry = await self.hub.open(stream)  # a recorded stream is read back off the loop
        if entry is None or not entry.started:
            return routes.text(HTTPStatus.NOT_FOUND, f"unknown stream {stream!r}")
        body = (await self._rendered(kind, entry)).body
        address = peer_address(connection)
        refused = self._refusal(address, len(body))  # bigger than it was: kept for the retry
        if refused is not None:
            return refused
        self.delivery.budget.spend(address, len(body), time.monotonic())
        self._deadline(connection, len(body))
        return routes.subtitles(kind, lambda: body, entry.stream)

    def _refusal(self, address: str, size: int) -> Response | None:
        """429 if `size` bytes do not fit `address`'s download budget (or everyone's) now."""
        wait = self.delivery.budget.wait_s(address, size, time.monotonic())
        if wait <= 0:
            return None
        self.refusals.refused("downloads", f"{size} bytes; retry in {wait:.0f} s")
        retry = str(max(1, round(wait)))
        return routes.response(
            HTTPStatus.TOO_MANY_REQUESTS,
            f"too many subtitle downloads from here: try again in {retry} s\n",
            extra=(("Retry-After", retry),),
        )

    def _deadline(self, connection: ServerConnection, size: int) -> None:
        """The response goes out under a close timeout long enough for its whole body at a
        modest pace (a large file is never cut off); when it runs out, the socket is dropped
        (websockets applies `close_timeout` only once the body is written: a reader that
        stalls would hold it, and the body, for ever)."""
        cfg = self.config
        timeout = cfg.subtitle_send_base_s + size / cfg.subtitle_send_rate
        connection.close_timeout = max(connection.close_timeout or 0.0, timeout)
        loop = asyncio.get_running_loop()
        timer = loop.call_later(timeout, self._expired, connection, timeout)
        connection.connection_lost_waiter.add_done_callback(lambda _: timer.cancel())

    def _expired(self, connection: ServerConnection, timeout: float) -> None:
        """Reset the connection: what is buffered for it goes, ours and the kernel's (a plain
        close would leave the kernel sending its send buffer to a reader that never reads)."""
        if connection.connection_lost_waiter.done():
            return
        self.refusals.refused("downloads", f"not taken within {timeout:.0f} s: dropped")
        with contextlib.suppress(Exception):
            sock = connection.transport.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            connection.transport.abort()

    def _rendered(self, kind: str, entry: StreamEntry) -> asyncio.Task[SubtitleDoc]:
        """The stream's subtitle file, made off the event loop and kept until its next final:
        a looping downloader costs nothing more, concurrent downloads share it, and a file
        made before is extended with the new finals rather than made again."""
        key = (entry.stream, kind)
        finals = entry.log.finals()  # a copy: the thread works on what the log holds now
        names = tuple(sorted(entry.names.items()))  # renamed speakers (`names.py`)
        state = (entry.log.epoch, finals[-1].seq if finals else 0, names)
        made = self._made.get(key)
        if made is not None and made[0] == state and not made[1].cancelled():
            return made[1]
        # a file made under another names map is made again, not extended
        before = made[1] if made is not None and made[0][2] == names else None
        dropped = entry.log.dropped_seq
        # the minutes' date: the day this server first had the stream (its local time)
        day = time.strftime("%Y-%m-%d", time.localtime(entry.created))
        task = asyncio.ensure_future(
            self._make(kind, entry.stream, state[0], finals, dropped, before, day, dict(names))
        )
        self._made.pop(key, None)
        self._made[key] = (state, task)
        self._trim()
        return task

    def _trim(self) -> None:
        """The least recently made files go first, beyond `SUBTITLE_CACHE_SIZE` or `_BYTES`."""
        size = sum(len(d.body) for d in self._docs())
        for key in list(self._made)[:-1]:
            if len(self._made) <= SUBTITLE_CACHE_SIZE and size <= SUBTITLE_CACHE_BYTES:
                break
            task = self._made.pop(key)[1]
            if task.done() and not task.cancelled() and task.exception() is None:
                size -= len(task.result().body)

    def _docs(self) -> list[SubtitleDoc]:
        return [
            t.result()
            for _, t in self._made.values()
            if t.done() and not t.cancelled() and t.exception() is None
        ]

    async def _make(
        self,
        kind: str,
        stream: str,
        epoch: str,
        finals: list[Caption],
        dropped: int,
        before: asyncio.Task[SubtitleDoc] | None,
        day: str = "",
        names: dict[str, str] | None = None,
    ) -> SubtitleDoc:
        """The file of the log's finals (`finals` in memory, those through `dropped` on disk),
        their speakers shown as `names` says: the one made `before` extended if it can be,
        else made whole."""
        shown = names or {}
        finals = [renamed(c, shown) for c in finals]
        doc = None
        if before is not None:  # made one after the other: each extends the last
            with contextlib.suppress(Exception):
                doc = await asyncio.shield(before)
        if doc is not None and doc.epoch == epoch and doc.appendable:
            new = [c for c in finals if c.seq > doc.through]
            if dropped > doc.through:  # finals the log has dropped since: on disk
                old = await self.delivery.older_finals(stream, epoch, doc.through, dropped)
                new = [renamed(c, shown) for c in old] + new
            if await asyncio.to_thread(doc.extend, new):
                return doc
        older = await self.delivery.older_finals(stream, epoch, 0, dropped)
        older = [renamed(c, shown) for c in older]
        return await asyncio.to_thread(
            lambda: SubtitleDoc.render(kind, epoch, older + finals, title=stream, date=day)
        )
