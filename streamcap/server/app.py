"""The caption server: asyncio I/O around the sans-I/O protocol (`protocol.py`).

One port serves WebSocket `/ingest` (publishers, `ingest.py`) and `/captions` (viewers), and
plain HTTP (`routes.py`) for the pages, static files, `/healthz`, `/metrics` and
`/streams/<id>.srt|.vtt`. Audio is decoded and resampled on the event loop (cheap) and handed
to one `LiveStream` per publisher session; captions come back from the worker thread through
`call_soon_threadsafe`, are numbered into the stream's `CaptionLog` (`hub.py`), recorded
(`record.py`), and fanned out to viewers.

Before any of that, every request passes `access.py` (Host against DNS rebinding, Origin
against cross-site hijacking, the metrics rule) and a cap on open connections counted from the
TCP accept, so neither a hostile page nor a connection flood reaches the streams.

Shutdown (`close`) is graceful: stop accepting, finalise every publisher's open utterance, let
viewers receive those finals, then close viewers with 1001.

Unknown streams: by default a viewer of a stream that has no publisher yet stays connected and
waits (an OBS overlay is usually opened before the stream starts, and a viewer whose publisher
reconnects should not notice); `unknown_stream="reject"` closes it with 1008 instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import ssl
import time
from collections.abc import Awaitable, Callable
from http import HTTPStatus
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlsplit

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from streamcap.core.captions import Caption, CaptionEvent
from streamcap.formats import render_srt, render_vtt

from . import access, routes
from .bucket import BucketsByKey, TokenBucket
from .budget import ConnectionBudget
from .config import ServerConfig, StreamFactory, live_stream_factory
from .hub import Hub, Publication, StreamEntry
from .ingest import IngestSession
from .metrics import CONTENT_TYPE, ServerMetrics, engine_info, worker_snapshot
from .protocol import (
    CloseCode,
    ProtocolError,
    Refused,
    check_token,
    error_message,
    extract_token,
    parse_speaker,
    parse_ws_path,
)
from .ratelog import RateLimitedLog
from .record import Recorder
from .rooms import RoomClaims, who
from .viewers import serve_viewer

if TYPE_CHECKING:
    from streamcap.runtime.worker_api import Worker

__all__ = ["CaptionServer", "ServerConfig", "StreamFactory", "live_stream_factory"]

log = logging.getLogger("streamcap.server")

#: How long a refused client has to answer our close frame before its socket is dropped.
REFUSE_CLOSE_TIMEOUT_S = 0.5
#: A subtitle response may take this long plus its size at SUBTITLE_SEND_MIN_RATE bytes/s.
SUBTITLE_SEND_BASE_S = 10.0
SUBTITLE_SEND_MIN_RATE = 256 * 1024
#: A connection dropped at the accept is held unread this long first (at most TARPIT_MAX at once).
TARPIT_S = 1.0
TARPIT_MAX = 64
#: Rendered subtitle files kept (per stream and kind, for the state they were made from).
SUBTITLE_CACHE_SIZE = 16
#: How often "out of file descriptors" is logged at most (asyncio retries accept every second).
FD_LOG_INTERVAL_S = 60.0


class CaptionServer:
    """One server instance: `await start()`, `await close()` (or `serve_forever()`)."""

    def __init__(
        self,
        config: ServerConfig,
        worker: Worker,
        stream_factory: StreamFactory | None = None,
    ) -> None:
        self.config = config
        self.worker = worker
        self.stream_factory = stream_factory or live_stream_factory(
            worker, default_language=config.default_language
        )
        self.recorder = Recorder(config.record_dir) if config.record_dir is not None else None
        restore = None
        if self.recorder is not None:
            recorder = self.recorder

            def restore(stream: str) -> Any:
                return recorder.load(stream, max_finals=config.memory_finals)

        self.hub = Hub(
            retain=config.retain_streams, max_finals=config.memory_finals, restore=restore
        )
        #: (room, speaker name or "") -> its publisher's session, from its valid start on
        self._publishers: RoomClaims[IngestSession] = RoomClaims(config.max_speakers_per_room)
        #: every publisher connection, started or not (shutdown stops them all)
        self._sessions: set[IngestSession] = set()
        self.metrics = ServerMetrics(
            self.hub.snapshot,
            self._worker_metrics,
            engine_info(worker.engine),
            remote=worker.remote_snapshot,
        )
        self.web_dir = config.web_dir or routes.default_web_dir()
        self.rlog = RateLimitedLog(log)
        self._fd_log = RateLimitedLog(log, interval_s=FD_LOG_INTERVAL_S, burst=1)
        self._server: Server | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.viewer_done: set[asyncio.Event] = set()
        #: connections refused at the accept that are held a moment before the drop
        self.tarpitted = 0
        self._closing = False
        self.connections = ConnectionBudget(
            config.connection_limit,
            config.max_pending_per_address,
            accept_rate=config.max_accept_rate_per_address,
        )
        #: rendered subtitles by (stream, kind): ((epoch, last seq), the body being made)
        self._subtitles_made: dict[tuple[str, str], tuple[tuple[str, int], asyncio.Task[bytes]]]
        self._subtitles_made = {}
        #: subtitle bytes per client address, and in all (`bucket.TokenBucket`)
        self._downloads = BucketsByKey(config.download_rate, config.download_burst)
        self._downloads_all = TokenBucket(4 * config.download_rate, 4 * config.download_burst)
        self.started_at = time.time()

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        cfg = self.config
        if cfg.record_dir is not None:
            cfg.record_dir.mkdir(parents=True, exist_ok=True)
        self._loop = asyncio.get_running_loop()
        self._loop.set_exception_handler(self._loop_exception)
        tls = self._ssl_context()
        self._server = await serve(
            self._handler,
            cfg.host,
            cfg.port,
            process_request=self._process_request,
            ssl=tls,
            max_size=2 * cfg.max_frame_bytes,  # bigger frames get protocol.py's clear 1009
            compression=None,  # PCM does not compress; deflate would only cost CPU
            ping_interval=cfg.ping_interval_s,
            server_header="streamcap",
            create_connection=_counted_connection(self),
            # No overall handshake deadline: it would cut a long subtitle download (a response
            # is part of the handshake). `_counted_connection` gives each connection
            # `handshake_timeout_s` to send its request, and a response its own close timeout.
            open_timeout=None,
            ssl_handshake_timeout=cfg.handshake_timeout_s if tls is not None else None,
        )

    def _ssl_context(self) -> ssl.SSLContext | None:
        cfg = self.config
        if cfg.tls_cert is None or cfg.tls_key is None:
            return None
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cfg.tls_cert, cfg.tls_key)
        return ctx

    def _loop_exception(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        """Out of file descriptors, asyncio logs a traceback per accept retry (every second):
        say it once a minute instead, with what to do."""
        exc = context.get("exception")
        if isinstance(exc, OSError) and exc.errno in (errno.EMFILE, errno.ENFILE):
            self.metrics.refuse("connections")
            self._fd_log.error(
                "fd",
                "out of file descriptors (%s): new connections wait; raise the limit "
                "(ulimit -n) or lower --max-connections (now %d)",
                errno.errorcode.get(exc.errno, exc.errno),
                self.config.connection_limit,
            )
            return
        if self._closing and "_start_serving" in repr(context.get("handle")):
            # asyncio's accept retry after EMFILE fires on a listening socket we just closed
            log.debug("accept retry after shutdown ignored: %s", exc)
            return
        loop.default_exception_handler(context)

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("server not started")
        return int(self._server.sockets[0].getsockname()[1])

    def url(self, path: str = "/", *, websocket: bool = False) -> str:
        host = self.config.host
        if host in ("", "0.0.0.0", "::"):
            host = "127.0.0.1"
        elif ":" in host:
            host = f"[{host}]"
        scheme = (
            ("wss" if self.config.tls else "ws")
            if websocket
            else ("https" if self.config.tls else "http")
        )
        return f"{scheme}://{host}:{self.port}{path}"

    async def serve_forever(self) -> None:
        assert self._server is not None
        await self._server.serve_forever()

    async def close(self) -> None:
        """Graceful shutdown: stop accepting, finalise every open utterance, deliver the finals
        to connected viewers, then close everything (1001)."""
        if self._server is None or self._closing:
            return
        self._closing = True
        self._server.server.close()  # stop listening; open connections stay
        cfg = self.config
        sessions = list(self._sessions)
        for s in sessions:
            s.request_stop(CloseCode.GOING_AWAY, "server shutting down")
        if sessions:
            await _wait_events([s.done for s in sessions], cfg.finish_timeout_s + 5)
        for _entry, viewer in self.hub.live_viewers():
            viewer.closing = True
            viewer.wake.set()
        if self.viewer_done:
            await _wait_events(list(self.viewer_done), cfg.shutdown_flush_s)
        self._server.close(close_connections=True)
        await self._server.wait_closed()
        if self.recorder is not None:
            self.recorder.close([e.log for e in self.hub.entries()])

    # ------------------------------------------------------------------ HTTP

    def _process_request(
        self, connection: ServerConnection, request: Request
    ) -> Response | Awaitable[Response] | None:
        try:
            resp = self._screen_request(connection, request)
        except Exception:  # a bug must cost one request, not a traceback per request
            return self._request_failed(request)
        if resp is not None and not isinstance(resp, Response):
            return self._finish_request(resp, request)
        return resp

    def _request_failed(self, request: Request) -> Response:
        self.rlog.error("http_error", "request %.80r failed", request.path, exc_info=True)
        resp = routes.text(HTTPStatus.INTERNAL_SERVER_ERROR, "internal server error")
        self.metrics.http_requests.labels(str(resp.status_code)).inc()
        return resp

    async def _finish_request(self, pending: Awaitable[Response], request: Request) -> Response:
        """A response made off the event loop (subtitles): counted once it is ready."""
        try:
            resp = await pending
        except Exception:
            return self._request_failed(request)
        self.metrics.http_requests.labels(str(resp.status_code)).inc()
        return resp

    def _screen_request(
        self, connection: ServerConnection, request: Request
    ) -> Response | Awaitable[Response] | None:
        cfg = self.config
        path = urlsplit(request.path).path
        upgrade = request.headers.get_all("Upgrade")
        websocket = any(u.lower() == "websocket" for u in upgrade)
        hosts = request.headers.get_all("Host")
        if len(hosts) > 1 or not access.host_allowed(
            hosts[0] if hosts else None, cfg.host, cfg.allowed_hosts
        ):
            self.refused("host", f"Host {hosts[0][:60]!r} is not this server's" if hosts else "")
            resp = routes.text(
                HTTPStatus.MISDIRECTED_REQUEST,
                "this server does not answer to that host name (see --allow-host)",
            )
            if not websocket:
                self.metrics.http_requests.labels(str(resp.status_code)).inc()
            return resp
        if websocket:
            if path.rstrip("/") not in ("/ingest", "/captions"):
                self.refused("bad_path")
                return routes.text(HTTPStatus.NOT_FOUND, "WebSocket paths: /ingest, /captions")
            if not access.origin_allowed(
                request.headers.get_all("Origin"), hosts, cfg.allowed_origins
            ):
                self.refused("origin")
                return routes.text(HTTPStatus.FORBIDDEN, "origin not allowed")
            if self._closing:
                return routes.text(HTTPStatus.SERVICE_UNAVAILABLE, "server shutting down")
            return None
        made = self._http(path, request, connection)
        if isinstance(made, Response):  # else counted by `_finish_request`
            self.metrics.http_requests.labels(str(made.status_code)).inc()
        return made

    def _http(
        self, path: str, request: Request, connection: ServerConnection
    ) -> Response | Awaitable[Response]:
        if path in routes.PAGES:
            return routes.static_file(self.web_dir, routes.PAGES[path])
        if path.startswith("/static/"):
            return routes.static_file(self.web_dir, path[len("/static/") :])
        if path == "/healthz":  # alive: 200 even when full (say so in the body)
            full = self.full()
            body = self.worker.health()  # remote backends: the replicas
            return routes.text(HTTPStatus.OK, f"full: {full}; {body}" if full else body)
        if path == "/readyz":  # takes another publisher: a load balancer routes by this
            full = self.full()
            if full is None and not self.worker.usable():
                full = "no inference replica usable"
            if full:
                return routes.text(HTTPStatus.SERVICE_UNAVAILABLE, f"full: {full}")
            return routes.text(HTTPStatus.OK, "ready")
        if path == "/metrics":
            return self._metrics(request, connection)
        if path.rstrip("/") in ("/ingest", "/captions"):
            return routes.text(HTTPStatus.UPGRADE_REQUIRED, "this path needs a WebSocket")
        m = routes.SUBTITLE_RE.fullmatch(path)
        if m:
            return self._subtitles(m.group(1), m.group(2), request, connection)
        return routes.text(HTTPStatus.NOT_FOUND, "not found")

    def _metrics(self, request: Request, connection: ServerConnection) -> Response:
        cfg = self.config
        params = dict(parse_qsl(urlsplit(request.path).query))
        token = extract_token(params, request.headers.get)
        has_token = cfg.metrics_token is not None
        peer = connection.remote_address[0] if connection.remote_address else None
        if not access.metrics_allowed(
            has_token and check_token(cfg.metrics_token, token), has_token, cfg.host, peer
        ):
            self.refused("auth", "metrics")
            if has_token:
                return routes.text(HTTPStatus.UNAUTHORIZED, "missing or wrong metrics token")
            return routes.text(HTTPStatus.FORBIDDEN, "metrics: loopback only (see --metrics-token)")
        return routes.response(HTTPStatus.OK, self.metrics.render(), CONTENT_TYPE)

    def _subtitles(
        self, stream: str, kind: str, request: Request, connection: ServerConnection
    ) -> Response | Awaitable[Response]:
        params = dict(parse_qsl(urlsplit(request.path).query))
        if not check_token(self.config.view_token, extract_token(params, request.headers.get)):
            return routes.text(HTTPStatus.UNAUTHORIZED, "missing or wrong view token")
        entry = self.hub.get(stream)
        if entry is None or not entry.started:
            return routes.text(HTTPStatus.NOT_FOUND, f"unknown stream {stream!r}")
        return self._send_subtitles(kind, entry, connection)

    async def _send_subtitles(
        self, kind: str, entry: StreamEntry, connection: ServerConnection
    ) -> Response:
        body = await self._rendered(kind, entry)
        wait = self._download_wait(connection, len(body))
        if wait > 0:
            self.refused("downloads", f"{len(body)} bytes; retry in {wait:.0f} s")
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
        made = self._subtitles_made.get(key)
        if made is not None and made[0] == state and not made[1].cancelled():
            return made[1]
        finals = entry.log.finals()  # a copy: the thread renders what the log held now
        older = self._older_finals(entry, 0) or list
        render = render_vtt if kind == "vtt" else render_srt
        task = asyncio.ensure_future(
            asyncio.to_thread(lambda: render(older() + finals).encode("utf-8", "replace"))
        )
        self._subtitles_made[key] = (state, task)
        while len(self._subtitles_made) > SUBTITLE_CACHE_SIZE:  # oldest first
            del self._subtitles_made[next(iter(self._subtitles_made))]
        return task

    def _older_finals(self, entry: StreamEntry, after: int) -> Callable[[], list[Caption]] | None:
        """A blocking read (run it off the loop) of the recorded finals with a seq above `after`
        that the stream's log has dropped from memory as of now; None when there are none to
        read (nothing dropped past `after`, or no `--record`)."""
        through, epoch, recorder = entry.log.dropped_seq, entry.log.epoch, self.recorder
        if recorder is None or after >= through:
            return None
        return lambda: recorder.finals(entry.stream, epoch, after, through)

    async def replay(self, entry: StreamEntry, cursor: int) -> list[Caption]:
        """What a viewer at `cursor` is sent next, in seq order: the log's events after it, and
        before them the recorded finals the log no longer holds (read off the event loop)."""
        older = self._older_finals(entry, cursor)
        events = entry.log.since(cursor)
        if older is None:
            return events
        try:
            back = await asyncio.to_thread(older)
        except Exception:  # an unreadable recording costs the replay, never the viewer
            self.rlog.error(
                "replay",
                "stream %s: reading the recording back failed",
                entry.stream,
                exc_info=True,
            )
            back = []
        return sorted(back + events, key=lambda c: c.seq)

    # ------------------------------------------------------------------ WebSocket

    def refused(self, label: str, detail: str = "", stream: str | None = None) -> None:
        """Count a refusal and log it (rate-limited per reason; never a token)."""
        self.metrics.refuse(label)
        where = f" stream {stream}" if stream else ""
        more = f" ({detail})" if detail else ""
        self.rlog.info(f"refused:{label}", "refused%s: %s%s", where, label, more)

    async def refuse(
        self, ws: ServerConnection, err: ProtocolError, label: str, stream: str | None = None
    ) -> None:
        route = urlsplit(ws.request.path).path if ws.request is not None else "?"
        self.refused(label, f"{route} {err.code}: {err.reason[:100]}", stream)
        # A refused client gets its close frame but not 10 s of our reading: a flooder keeps
        # sending until it sees the close, and every frame of that would still be parsed.
        ws.close_timeout = min(ws.close_timeout or REFUSE_CLOSE_TIMEOUT_S, REFUSE_CLOSE_TIMEOUT_S)
        try:
            await ws.send(error_message(err.code, err.reason))
            if label == "flood" and isinstance(ws.transport, asyncio.ReadTransport):
                ws.transport.pause_reading()  # what it keeps sending is not even read
            await ws.close(err.code, err.close_reason)
        except ConnectionClosed:
            pass

    async def _handler(self, ws: ServerConnection) -> None:
        assert ws.request is not None
        try:
            route, params = parse_ws_path(ws.request.path)
        except ProtocolError as e:
            await self.refuse(ws, e, "bad_path")
            return
        self.metrics.connections.labels(route).inc()
        token = extract_token(params, ws.request.headers.get)
        expected = self.config.publish_token if route == "ingest" else self.config.view_token
        if not check_token(expected, token):
            what = "publish" if route == "ingest" else "view"
            msg = f"missing {what} token" if token is None else f"wrong {what} token"
            await self.refuse(ws, ProtocolError(CloseCode.POLICY_VIOLATION, msg), "auth")
            return
        if route == "ingest":  # a publisher is authenticated once its start claims a place
            try:
                speaker = parse_speaker(params["speaker"]) if params.get("speaker") else ""
            except ProtocolError as e:
                await self.refuse(ws, e, "bad_path")
                return
            await self._ingest(ws, params["stream"], speaker)
        else:
            self.authenticated(ws)
            await serve_viewer(
                self, ws, params["stream"], int(params["since"]), params.get("epoch")
            )

    # ---- ingest

    def _refusal_at_connect(self, stream: str, speaker: str) -> tuple[ProtocolError, str] | None:
        """A refusal that is certain before the start message (a taken URL name on a server
        without a publish token, a full room, the limits), so such a client hears it at once.
        Anything that depends on the start message's name waits for `claim`."""
        if self._closing:
            return ProtocolError(CloseCode.GOING_AWAY, "server shutting down"), "shutdown"
        held = self._publishers.get(stream, speaker) if speaker else None
        if held is not None and not (held.connected and self.config.publish_token is None):
            return None  # the same publisher coming back: decided at its start (`claim`)
        if not speaker and any(s.stream == stream for s in self._publishers):
            return None  # the start may name it: decided at its start
        return self._refusal(stream, speaker)

    def _refusal(self, stream: str, speaker: str) -> tuple[ProtocolError, str] | None:
        room_err = self._publishers.refusal(stream, speaker)
        if room_err is not None:
            return room_err, "busy"
        cfg = self.config
        if len(self._publishers) >= cfg.max_streams:
            why = f"server is at its limit of {cfg.max_streams} streams"
            return ProtocolError(CloseCode.POLICY_VIOLATION, why), "limit"
        full = self.full(stream)
        if full:
            return ProtocolError(CloseCode.TRY_AGAIN_LATER, f"server is full: {full}"), "full"
        return None

    async def claim(self, session: IngestSession, speaker: str) -> None:
        """`session` sent a valid start naming `speaker` (from its URL or its start message):
        it takes its place in the room, or `Refused` says why not.

        The one claim rule: a name is one publisher's. The same publisher coming back (its
        dropped connection still finalising, or — with a publish token — one still open) takes
        over once the old session's audio is finalised; anyone else is refused."""
        cfg = self.config
        stream = session.stream
        while (old := self._publishers.get(stream, speaker)) is not None:
            if old.connected and cfg.publish_token is None:
                err = self._publishers.refusal(stream, speaker)
                assert err is not None
                raise Refused(err, "busy")
            if old.connected:
                self.rlog.info("takeover", "%s: a new connection takes over", who(stream, speaker))
                # the old connection is often a dead path (the publisher changed networks): its
                # close handshake must not hold the new one for the 10 s close timeout
                old.ws.close_timeout = min(
                    old.ws.close_timeout or REFUSE_CLOSE_TIMEOUT_S, REFUSE_CLOSE_TIMEOUT_S
                )
                old.request_stop(CloseCode.GOING_AWAY, "replaced by a new connection")
            try:
                await asyncio.wait_for(old.done.wait(), cfg.finish_timeout_s + 5)
            except asyncio.TimeoutError:
                why = f"{who(stream, speaker)} is still finishing"
                raise Refused(ProtocolError(CloseCode.POLICY_VIOLATION, why), "busy") from None
        if self._closing:
            raise Refused(ProtocolError(CloseCode.GOING_AWAY, "server shutting down"), "shutdown")
        refused = self._refusal(stream, speaker)
        if refused is not None:
            raise Refused(*refused)
        self._publishers.claim(stream, speaker, session)
        session.speaker = speaker
        self.authenticated(session.ws)

    def authenticated(self, ws: ServerConnection) -> None:
        """`ws` proved itself (token checked, or a publisher's place claimed): it leaves the
        budget of connections not yet authenticated (`budget.ConnectionBudget`)."""
        done = getattr(ws, "authenticated", None)
        if done is not None:
            done()

    async def _ingest(self, ws: ServerConnection, stream: str, speaker: str = "") -> None:
        refused = self._refusal_at_connect(stream, speaker)
        if refused is not None:
            await self.refuse(ws, refused[0], refused[1], stream)
            return
        session = IngestSession(self, ws, stream, speaker)
        self._sessions.add(session)
        try:
            await session.run()
        finally:  # its place, if its start claimed one
            self._sessions.discard(session)
            self._publishers.release(stream, session.speaker, session)

    # ---- capacity (admission control: `core.capacity`, measured by the worker)

    def _live_rooms(self) -> set[str]:
        """Streams with a publisher: the talk channels admission charges (`core.capacity`)."""
        return {session.stream for session in self._publishers}

    def full(self, stream: str | None = None) -> str | None:
        """Why a new publisher (of ``stream``) would be refused now, or None when it would be
        admitted. A publisher joining a room that is live shares its talking time."""
        if not self.config.admission:
            return None
        rooms = self._live_rooms()
        decision = self.worker.admission(len(rooms), stream in rooms)
        return None if decision.ok else str(decision.reason)

    def streams_changed(self) -> None:
        """Tell the worker's meter how many talk channels (rooms with a publisher) are live."""
        self.worker.streams_changed(self.hub.rooms_publishing)

    def _worker_metrics(self) -> dict[str, float]:
        out = worker_snapshot(self.worker)
        m = self.worker.load()
        out.update(load_busy=m.busy, load_finals=m.finals, final_wait_p95=m.final_wait_p95_s)
        decision = self.worker.admission(len(self._live_rooms()))
        out.update(
            stream_finals_load=decision.per_stream,
            capacity_streams=float(min(decision.capacity, self.config.max_streams)),
            accepting=float(decision.ok or not self.config.admission),
        )
        out.update(self.worker.costs.snapshot())
        return out

    def caption_callback(
        self, entry: StreamEntry, pub: Publication
    ) -> Callable[[CaptionEvent], None]:
        loop = self._loop
        assert loop is not None

        def on_caption(cap: CaptionEvent) -> None:  # worker thread or the loop (feed)
            with contextlib.suppress(RuntimeError):  # the loop is closed at shutdown
                loop.call_soon_threadsafe(self._deliver, entry, cap, pub)

        return on_caption

    def _deliver(self, entry: StreamEntry, cap: CaptionEvent, pub: Publication) -> None:
        try:
            out = entry.add(cap, pub)
        except Exception:  # one bad event never ends the stream: the rest goes on
            self.rlog.error(
                "deliver", "stream %s: a caption could not be added", entry.stream, exc_info=True
            )
            return
        if self.recorder is not None:
            try:
                self.recorder.before_send(entry.log)
                if out.type == "final":
                    self.recorder.write(out)
            except Exception:
                self.rlog.error(
                    "record", "stream %s: recording an event failed", entry.stream, exc_info=True
                )
        self.metrics.captions.labels(out.type).inc()
        if out.type == "final":
            self.metrics.final_latency.observe(max(0.0, out.latency_ms) / 1000.0)

    def recorder_close(self, stream: str) -> None:
        if self.recorder is not None:
            self.recorder.close_stream(stream)


async def _wait_events(events: list[asyncio.Event], timeout: float) -> None:
    waiters = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait(waiters, timeout=timeout)
    finally:
        for w in waiters:
            w.cancel()


def _counted_connection(server: CaptionServer) -> type[ServerConnection]:
    """A `ServerConnection` counted from the TCP accept on (`budget.ConnectionBudget`): over
    the budget — all connections, or those not yet authenticated from one address — a new one
    is dropped before its handshake; one that has not sent its whole request within
    `handshake_timeout_s` is dropped too. So idle sockets hold neither stream slots nor file
    descriptors, and strangers cannot lock token holders out."""
    budget = server.connections

    class CountedConnection(ServerConnection):
        _counted = False
        _dropped = False
        _pending = False
        _address = ""
        _deadline: asyncio.TimerHandle | None = None
        _tarpit: asyncio.Transport | None = None

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            peer = transport.get_extra_info("peername")
            address = str(peer[0]) if isinstance(peer, tuple) and peer else "?"
            why = budget.refusal(address, time.monotonic())
            if why is not None:  # dropped before websockets sets anything up: cheap
                self._dropped = True
                server.refused("connections", why)
                if server.tarpitted < TARPIT_MAX and isinstance(transport, asyncio.Transport):
                    # held unread a moment before the drop: a client that loops connections
                    # then waits, instead of costing an accept every few hundred microseconds
                    server.tarpitted += 1
                    self._tarpit = transport
                    transport.pause_reading()
                    loop = asyncio.get_running_loop()
                    self._deadline = loop.call_later(TARPIT_S, self._untarpit)
                elif isinstance(transport, asyncio.Transport):
                    transport.abort()
                else:
                    transport.close()
                return
            super().connection_made(transport)
            budget.accept(address)
            self._counted = self._pending = True
            self._address = address
            self._deadline = self.loop.call_later(
                server.config.handshake_timeout_s, self._handshake_expired
            )

        def _untarpit(self) -> None:
            transport, self._tarpit = self._tarpit, None
            if transport is not None:
                server.tarpitted -= 1
                transport.abort()

        def _handshake_expired(self) -> None:
            if self.request is None:  # no complete request in time: a slow or idle socket
                server.refused("handshake_timeout", self._address)
                self.transport.abort()

        def authenticated(self) -> None:
            if self._pending:
                self._pending = False
                budget.authenticate(self._address)

        def connection_lost(self, exc: Exception | None) -> None:
            if self._dropped:  # never set up: nothing of websockets' to tear down
                if self._tarpit is not None:
                    self._tarpit = None
                    server.tarpitted -= 1
                    if self._deadline is not None:
                        self._deadline.cancel()
                return
            if self._deadline is not None:
                self._deadline.cancel()
            if self._counted:
                self._counted = False
                budget.close(self._address, self._pending)
                self._pending = False
            super().connection_lost(exc)

    return CountedConnection
