"""`/streams/ID/captions.m3u8`, its `captions-N.vtt` segments and `/streams/ID/master.m3u8`:
a stream's captions as a live HLS subtitle rendition (`formats.hls`), for HLS players and
packagers to carry beside the video.

The rules of the subtitle downloads (`subtitles.py`) apply: the view token (``?token=`` or
``Authorization: Bearer``), and each response paid for from its client address's byte budget
(`bucket.ByteBudget`, shared with downloads and replays), checked before any work: 429 with
Retry-After beyond it. The work is small and made once: a stream's track (`LiveVttTrack`) is
kept, fed the stream's log from where it was (`CaptionLog.since`), and a segment is written
when it is published and then served as it is (its speakers named as the stream's renames
said then: `names.py`). Tracks are kept for the streams the hub keeps
(the least recently asked for dropped beyond that); one made again starts from the log's
finals in memory.

The stream's clock decides what is published: the room's clock while a publisher is in it
(`hub.StreamEntry.clock_base`), less `SETTLE_S` for the first partial of an utterance to come;
a stream with nobody publishing for `END_AFTER_S` (a publisher that reconnects comes back
sooner) has ended: every segment is out and the playlist says ``#EXT-X-ENDLIST``. A playlist
asked for before the first segment is out waits for it (`HOLD_S` at most): a player takes a
playlist without segments for an error.

A query's ``token`` (when it was right) and ``mpegts`` (the video's 90 kHz timestamp of stream
second 0, for ``X-TIMESTAMP-MAP``; default 0) are carried into the URIs the playlists list, so a
player that was given one URL fetches the rest. A browser page elsewhere reads them when its
Origin is allowed (``--allow-origin``, or the server's own): CORS headers for it, none for
others. `master.m3u8` takes ``video=URI`` (with ``bandwidth``, ``resolution``, ``codecs``) to
list a video variant that shows the captions, ``lang`` and ``name`` for the rendition.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections import OrderedDict
from collections.abc import Awaitable
from http import HTTPStatus
from urllib.parse import parse_qsl, quote, urlsplit

from websockets.asyncio.server import ServerConnection
from websockets.http11 import Request, Response

from streamcap.core.speaker_names import renamed
from streamcap.formats.hls import (
    MPEGTS_WRAP,
    LiveVttTrack,
    VideoVariant,
    master_playlist,
)

from . import access, routes
from .accept import peer_address
from .config import ServerConfig
from .delivery import Delivery
from .hub import Hub, StreamEntry
from .refusal import Refusals
from .request import check_token, extract_token

HLS_RE = re.compile(
    r"/streams/([A-Za-z0-9_-][A-Za-z0-9_.-]{0,63})/(captions\.m3u8|master\.m3u8|captions-(\d{1,9})\.vtt)"
)
PLAYLIST_TYPE = "application/vnd.apple.mpegurl"
VTT_TYPE = "text/vtt; charset=utf-8"
#: Seconds of the stream's clock not yet published: the first partial of an utterance comes
#: about a second after its speech starts (`formats.hls.LiveVttTrack.settled_s`).
SETTLE_S = 3.0
#: A stream with no publisher this long has ended (``#EXT-X-ENDLIST``).
END_AFTER_S = 10.0
#: A playlist asked for before the stream's first segment is out waits for it this long at
#: most (players take a playlist without segments for an error: hls.js gives up on the
#: track after a few; they wait 10 s for an answer), looking every `HOLD_POLL_S`.
HOLD_S = 8.0
HOLD_POLL_S = 0.25
_LANG_RE = re.compile(r"[A-Za-z]{2,3}(-[A-Za-z0-9]{1,8}){0,3}")
_RESOLUTION_RE = re.compile(r"[1-9][0-9]{0,4}x[1-9][0-9]{0,4}")
_CODECS_RE = re.compile(r"[A-Za-z0-9.,+-]{1,200}")
_NAME_RE = re.compile(r"[^\"\r\n\x00-\x1f\x7f]{1,64}")
#: A URI we write into a playlist: printable ASCII, no space, quote or markup.
_URI_RE = re.compile(r"[A-Za-z0-9._~:/?#\[\]@!$&'()*+,;=%-]{1,2000}")


class _Held:
    """A stream's track and when it was last seen without a publisher."""

    __slots__ = ("epoch", "idle_since", "track")

    def __init__(self, epoch: str) -> None:
        self.epoch = epoch
        self.track = LiveVttTrack()
        self.idle_since: float | None = None


class HlsPlaylists:
    """Answers the HLS routes (see the module docstring)."""

    def __init__(
        self,
        config: ServerConfig,
        hub: Hub,
        delivery: Delivery,
        refusals: Refusals,
        *,
        settle_s: float | None = None,
        end_after_s: float | None = None,
    ) -> None:
        self.config = config
        self.hub = hub
        self.delivery = delivery
        self.refusals = refusals
        self.settle_s = SETTLE_S if settle_s is None else settle_s
        self.end_after_s = END_AFTER_S if end_after_s is None else end_after_s
        self._held: OrderedDict[str, _Held] = OrderedDict()

    def response(
        self, stream: str, what: str, index: str | None, request: Request,
        connection: ServerConnection,
    ) -> Response | Awaitable[Response]:  # fmt: skip
        params = dict(parse_qsl(urlsplit(request.path).query))
        token = extract_token(params, request.headers.get)
        if not check_token(self.config.view_token, token):
            return routes.text(HTTPStatus.UNAUTHORIZED, "missing or wrong view token")
        try:
            query = self._carried(params)
            master = _master_options(params) if what == "master.m3u8" else None
        except ValueError as e:
            return routes.text(HTTPStatus.BAD_REQUEST, str(e))
        address = peer_address(connection)
        refused = self._refusal(address, 1)
        if refused is not None:
            return refused
        cors = self._cors(request)
        if master is not None:  # nothing of the stream's but its name: no stream needed yet
            uri = "captions.m3u8" + query
            body = master_playlist(uri, name=master[0], language=master[1], video=master[2])
            return self._answer(address, body, PLAYLIST_TYPE, cors)
        return self._stream_answer(stream, index, params, query, address, cors)

    async def _stream_answer(
        self, stream: str, index: str | None, params: dict[str, str], query: str,
        address: str, cors: tuple[tuple[str, str], ...],
    ) -> Response:  # fmt: skip
        entry = await self.hub.open(stream)  # a recorded stream is read back off the loop
        if entry is None or not entry.started:
            return routes.text(HTTPStatus.NOT_FOUND, f"unknown stream {stream!r}")
        track = self._track(entry)
        deadline = time.monotonic() + HOLD_S
        while index is None and not track.published and entry.publishing:
            if time.monotonic() >= deadline:
                break
            await asyncio.sleep(HOLD_POLL_S)
            track = self._track(entry)
        if index is None:
            body = track.playlist(lambda i: f"captions-{i}.vtt{query}")
            return self._answer(address, body, PLAYLIST_TYPE, cors)
        mpegts = int(params.get("mpegts", "0"))
        segment = track.segment(int(index), mpegts)
        if segment is None:
            return routes.text(HTTPStatus.NOT_FOUND, f"no segment {index} (now) in {stream!r}")
        return self._answer(address, segment, VTT_TYPE, cors)

    def _track(self, entry: StreamEntry) -> LiveVttTrack:
        """The stream's track, fed what its log has that it has not seen, moved on by the
        stream's clock (or ended)."""
        held = self._held.get(entry.stream)
        if held is None or held.epoch != entry.log.epoch:  # a new log: a new track
            held = _Held(entry.log.epoch)
        self._held[entry.stream] = held
        self._held.move_to_end(entry.stream)
        while len(self._held) > max(1, self.config.retain_streams):
            self._held.popitem(last=False)
        track = held.track
        names = entry.names  # renamed speakers, as viewers see them (`names.py`)
        track.feed(renamed(c, names) for c in entry.log.since(track.fed_seq))
        now = time.monotonic()
        if entry.publishing:
            held.idle_since = None
            track.reopen()
            clock = entry.clock_base + (now - entry.clock_start)
            track.advance(track.settled_s(clock, self.settle_s))
            return track
        if held.idle_since is None:
            held.idle_since = now
        if entry.sessions == 0 or now - held.idle_since >= self.end_after_s:
            track.finish(entry.audio_s)  # read back from a recording, or gone long enough
        else:
            track.advance(track.settled_s(entry.audio_s, 0.0))
        return track

    def _carried(self, params: dict[str, str]) -> str:
        """The query the playlists' URIs carry: the token when it came in the query (it was
        checked), ``mpegts`` when given (checked)."""
        carried = []
        if params.get("token") and self.config.view_token is not None:
            carried.append(f"token={quote(params['token'], safe='')}")
        if "mpegts" in params:
            value = params["mpegts"]
            if not value.isdigit() or not 0 <= int(value) < MPEGTS_WRAP:
                raise ValueError(f"mpegts is the video's 90 kHz timestamp of stream second 0: "
                                 f"0 to {MPEGTS_WRAP - 1}")  # fmt: skip
            carried.append(f"mpegts={int(value)}")
        return "?" + "&".join(carried) if carried else ""

    def _cors(self, request: Request) -> tuple[tuple[str, str], ...]:
        """CORS headers for a browser page whose Origin this server allows (none for
        others: their browser keeps the response from them)."""
        origins = request.headers.get_all("Origin")
        hosts = request.headers.get_all("Host")
        if len(origins) != 1 or not access.origin_allowed(
            origins, hosts, self.config.allowed_origins
        ):
            return ()
        return (("Access-Control-Allow-Origin", origins[0]), ("Vary", "Origin"))

    def _answer(
        self, address: str, body: str, ctype: str, cors: tuple[tuple[str, str], ...]
    ) -> Response:
        data = body.encode("utf-8", "replace")
        self.delivery.budget.spend(address, len(data), time.monotonic())
        return routes.response(HTTPStatus.OK, data, ctype, cors)

    def _refusal(self, address: str, size: int) -> Response | None:
        """429 if `size` bytes do not fit `address`'s download budget (or everyone's) now."""
        wait = self.delivery.budget.wait_s(address, size, time.monotonic())
        if wait <= 0:
            return None
        self.refusals.refused("downloads", f"HLS: retry in {wait:.0f} s")
        retry = str(max(1, round(wait)))
        return routes.response(
            HTTPStatus.TOO_MANY_REQUESTS,
            f"too many downloads from here: try again in {retry} s\n",
            extra=(("Retry-After", retry),),
        )


def _master_options(params: dict[str, str]) -> tuple[str, str, VideoVariant | None]:
    """The master playlist's ``name``, ``lang`` and video variant from the query, checked
    (ValueError: what is wrong, in one line)."""
    name = params.get("name", "Captions")
    if not _NAME_RE.fullmatch(name):
        raise ValueError("name: 1-64 characters, no quotes or control characters")
    lang = params.get("lang", "")
    if lang and not _LANG_RE.fullmatch(lang):
        raise ValueError("lang: a language tag such as en or en-US")
    video = params.get("video")
    if video is None:
        return name, lang, None
    if not _URI_RE.fullmatch(video) or video.startswith("#"):
        raise ValueError("video: a URI (printable, no spaces or quotes), at most 2000 characters")
    bandwidth = params.get("bandwidth", "2000000")
    if not bandwidth.isdigit() or not 0 < int(bandwidth) < 10**12:
        raise ValueError("bandwidth: the video's peak bits per second, a whole number")
    resolution = params.get("resolution", "")
    if resolution and not _RESOLUTION_RE.fullmatch(resolution):
        raise ValueError("resolution: WIDTHxHEIGHT, e.g. 1280x720")
    codecs = params.get("codecs", "")
    if codecs and not _CODECS_RE.fullmatch(codecs):
        raise ValueError("codecs: RFC 6381 codec names, e.g. avc1.42e01e,mp4a.40.2")
    return name, lang, VideoVariant(video, int(bandwidth), resolution, codecs)
