"""`/streams/<id>.srt|.vtt`: a stream's subtitle file, rendered off the event loop, kept per
state of the stream, and paced per client address.

Its own piece because it is the one HTTP response that costs real work and real bandwidth:
10 000 finals (older ones read back from the recording) take a while to render, and a looping
downloader of a large file took the CPU from the captions (issue 21). So a render runs in a
thread and is kept until the stream's next event (concurrent and repeated downloads of one
state share it), downloads are metered in bytes per address and in all (`bucket.py`), and a
response gets a close timeout long enough for its whole body at a modest pace.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from http import HTTPStatus
from urllib.parse import parse_qsl, urlsplit

from websockets.asyncio.server import ServerConnection
from websockets.http11 import Request, Response

from streamcap.core.captions import Caption
from streamcap.formats import render_srt, render_vtt

from . import routes
from .bucket import BucketsByKey, TokenBucket
from .config import ServerConfig
from .hub import Hub, StreamEntry
from .refusal import Refusals
from .request import check_token, extract_token

#: A subtitle response may take this long plus its size at SUBTITLE_SEND_MIN_RATE bytes/s.
SUBTITLE_SEND_BASE_S = 10.0
SUBTITLE_SEND_MIN_RATE = 256 * 1024
#: Rendered subtitle files kept (per stream and kind, for the state they were made from).
SUBTITLE_CACHE_SIZE = 16

#: (stream, seq) -> a blocking read of the recorded finals above seq that the log has dropped
OlderFinals = Callable[[StreamEntry, int], Callable[[], list[Caption]] | None]


class SubtitleDownloads:
    """Answers subtitle requests (`response`); a download over its budget is refused (429)."""

    def __init__(
        self,
        config: ServerConfig,
        hub: Hub,
        older_finals: OlderFinals,
        refusals: Refusals,
    ) -> None:
        self.config = config
        self.hub = hub
        self._older_finals = older_finals
        self.refusals = refusals
        #: rendered subtitles by (stream, kind): ((epoch, last seq), the body being made)
        self._made: dict[tuple[str, str], tuple[tuple[str, int], asyncio.Task[bytes]]] = {}
        #: subtitle bytes per client address, and in all (`bucket.TokenBucket`)
        self._downloads = BucketsByKey(config.download_rate, config.download_burst)
        self._downloads_all = TokenBucket(4 * config.download_rate, 4 * config.download_burst)

    def response(
        self, stream: str, kind: str, request: Request, connection: ServerConnection
    ) -> Response | Awaitable[Response]:
        params = dict(parse_qsl(urlsplit(request.path).query))
        if not check_token(self.config.view_token, extract_token(params, request.headers.get)):
            return routes.text(HTTPStatus.UNAUTHORIZED, "missing or wrong view token")
        entry = self.hub.get(stream)
        if entry is None or not entry.started:
            return routes.text(HTTPStatus.NOT_FOUND, f"unknown stream {stream!r}")
        return self._send(kind, entry, connection)

    async def _send(self, kind: str, entry: StreamEntry, connection: ServerConnection) -> Response:
        body = await self._rendered(kind, entry)
        wait = self._download_wait(connection, len(body))
        if wait > 0:
            self.refusals.refused("downloads", f"{len(body)} bytes; retry in {wait:.0f} s")
            retry = str(max(1, round(wait)))
            return routes.response(
                HTTPStatus.TOO_MANY_REQUESTS,
                f"too many subtitle downloads from here: try again in {retry} s\n",
                extra=(("Retry-After", retry),),
            )
        # The response goes out under the connection's close timeout (the socket is closed
        # when it runs out): long enough for the whole body at a modest pace, so a large file
        # is never cut off, and a reader that stalls still lets go of its socket in the end.
        connection.close_timeout = max(
            connection.close_timeout or 0.0,
            SUBTITLE_SEND_BASE_S + len(body) / SUBTITLE_SEND_MIN_RATE,
        )
        return routes.subtitles(kind, lambda: body, entry.stream)

    def _download_wait(self, connection: ServerConnection, size: int) -> float:
        """0 if `size` bytes fit the client address's download budget and the server's (then
        spent), else the seconds until they would."""
        peer = connection.remote_address
        address = str(peer[0]) if peer else "?"
        now = time.monotonic()
        mine = self._downloads.of(address)
        wait = max(mine.wait_s(size, now), self._downloads_all.wait_s(size, now))
        if wait > 0:
            return wait
        mine.take(min(size, mine.burst), now)
        self._downloads_all.take(min(size, self._downloads_all.burst), now)
        return 0.0

    def _rendered(self, kind: str, entry: StreamEntry) -> asyncio.Task[bytes]:
        """The stream's subtitles, rendered off the event loop (10 000 finals take a while)
        and kept until the next event: a looping downloader costs one render per change, and
        concurrent downloads of the same state share it."""
        key = (entry.stream, kind)
        state = (entry.log.epoch, entry.log.last_seq)
        made = self._made.get(key)
        if made is not None and made[0] == state and not made[1].cancelled():
            return made[1]
        finals = entry.log.finals()  # a copy: the thread renders what the log held now
        older = self._older_finals(entry, 0) or list
        render = render_vtt if kind == "vtt" else render_srt
        task = asyncio.ensure_future(
            asyncio.to_thread(lambda: render(older() + finals).encode("utf-8", "replace"))
        )
        self._made[key] = (state, task)
        while len(self._made) > SUBTITLE_CACHE_SIZE:  # oldest first
            del self._made[next(iter(self._made))]
        return task
