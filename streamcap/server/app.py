"""The caption server: asyncio I/O around the sans-I/O protocol (`protocol.py`).

One port serves WebSocket `/ingest` (publishers, `ingest.py`) and `/captions` (viewers,
`viewers.py`), and plain HTTP (`routes.py`) for the pages, static files, `/healthz`, `/metrics`,
`/streams/<id>.srt|.vtt|.txt|.md` (`subtitles.py`) and the HLS subtitle rendition
`/streams/<id>/captions.m3u8` (`hls.py`). Audio is decoded and resampled on the event loop
(cheap) and handed to one `LiveStream` per publisher session; captions come back from the
worker thread through `call_soon_threadsafe`, are numbered into the stream's `CaptionLog`
(`hub.py`), recorded (`record.py`), and fanned out to viewers (`delivery.py`) and to the
stream's caption sinks (`streamcap.sinks`: YouTube, Zoom, OBS).

Before any of that, every request passes the gate (`gate.py`: Host against DNS rebinding,
Origin against cross-site hijacking, the metrics rule) and a cap on open connections counted
from the TCP accept (`accept.py`), so neither a hostile page nor a connection flood reaches the
streams. A publisher takes its place in a room by the one claim rule (`publishers.py`).

This module wires those parts together and owns the worker; a session is handed only its port
(`services.PublisherServices`, `services.ViewerServices`), never the server.

Shutdown (`close`) is graceful: stop accepting, finalise every publisher's open utterance, let
viewers receive those finals, then close viewers with 1001.

Unknown streams: by default a viewer of a stream that has no publisher yet stays connected and
waits (an OBS overlay is usually opened before the stream starts, and a viewer whose publisher
reconnects should not notice); `unknown_stream="reject"` closes it with 1008 instead.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import ssl
import time
from collections.abc import Awaitable, Sequence
from http import HTTPStatus
from typing import TYPE_CHECKING, Any

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.http11 import Request, Response

from streamcap.sinks.registry import make_sink
from streamcap.sinks.runner import SinkRunner

from . import routes
from .accept import authenticated, count_control_frames, counted_connection, peer_address
from .access import AddressShare
from .bucket import BucketsByKey, ByteBudget
from .budget import ConnectionBudget
from .client_text import parse_speaker
from .close import CloseCode, ProtocolError
from .config import ServerConfig, StreamFactory, live_stream_factory
from .delivery import Delivery
from .gate import RequestGate
from .hls import HLS_RE, HlsPlaylists
from .hub import Hub
from .ingest import IngestSession
from .metrics import ServerMetrics, WorkerFigures, engine_info
from .names import NAMES_RE, Renames
from .publishers import Publishers
from .ratelog import RateLimitedLog
from .record import Recorder
from .refusal import Refusals
from .request import check_token, extract_token, parse_ws_path
from .services import PublisherServices, ViewerServices
from .subtitles import SubtitleDownloads
from .viewers import serve_viewer
from .voices import VOICES_RE, Voices

if TYPE_CHECKING:
    from streamcap.core.live_config import LiveConfig
    from streamcap.runtime.worker_api import Worker

__all__ = ["CaptionServer"]

log = logging.getLogger("streamcap.server")

#: How often "out of file descriptors" is logged at most (asyncio retries accept every second).
FD_LOG_INTERVAL_S = 60.0


class CaptionServer:
    """One server instance: `await start()`, `await close()` (or `serve_forever()`)."""

    def __init__(
        self,
        config: ServerConfig,
        worker: Worker,
        stream_factory: StreamFactory | None = None,
        *,
        live: LiveConfig | None = None,
        speakers: str = "off",
        voices: Sequence[Any] = (),
    ) -> None:
        """``live``, ``speakers`` and ``voices`` (enrolled, ``--enroll``) tune the live
        streams the server builds (its factory also counts their dropped finals in
        /metrics); ``stream_factory`` replaces it."""
        self.config = config
        self.worker = worker
        self.stream_factory = stream_factory or live_stream_factory(
            worker,
            live,
            config.default_language,
            speakers,
            on_drop=lambda dropped: self.metrics.final_dropped(dropped),
            voices=voices,
        )
        self.recorder = Recorder(config.record_dir) if config.record_dir is not None else None
        restore = None
        if self.recorder is not None:

            def restore(stream: str) -> Any:  # read back off the loop (`delivery.Delivery`)
                return self.delivery.restore(stream, config.memory_finals)

        self.hub = Hub(
            retain=config.retain_streams, max_finals=config.memory_finals, restore=restore
        )
        self.rlog = RateLimitedLog(log)
        #: where streams' captions go besides the viewers (`streamcap.sinks`): built now (no
        #: I/O), each sink's task started with the server
        self.sinks = SinkRunner((s.kind, s.stream, make_sink(s)) for s in config.sinks)
        #: every publisher connection, and the places of those that started (the claim rule)
        self._publishers = Publishers(config, self.rlog, full=self.full, closing=self._shutting)
        self.metrics = ServerMetrics(
            self.hub.figures,
            self._worker_metrics,
            engine_info(worker.engine),
            remote=worker.remote_status,
            sinks=self.sinks.figures,
        )
        self.web_dir = config.web_dir or routes.default_web_dir()
        self._fd_log = RateLimitedLog(log, interval_s=FD_LOG_INTERVAL_S, burst=1)
        self._server: Server | None = None
        #: one event per open viewer, set when it has gone (shutdown waits for them)
        self.viewer_done: set[asyncio.Event] = set()
        self._closing = False
        self.refusals = Refusals(self.metrics, self.rlog)
        self.connections = ConnectionBudget(
            config.connection_limit,
            config.pending_per_address,
            accept_rate=config.max_accept_rate_per_address,
        )
        # an open side's slots and real time are shared out per client address
        self._viewer_share = AddressShare(config.viewers_per_address, "viewers", config.max_viewers)
        share, burst = config.streams_per_address, config.burst_s
        self._audio_by_address = (
            BucketsByKey(float(share), burst * share) if share and burst is not None else None
        )
        self.delivery = Delivery(
            self.recorder,
            self.metrics,
            self.rlog,
            ByteBudget(config.download_rate, config.download_burst),
            sinks=self.sinks,
        )
        self._subtitles = SubtitleDownloads(config, self.hub, self.delivery, self.refusals)
        self._names = Renames(config, self.hub, self.delivery, self.refusals)
        self._voices = Voices(config, self.refusals, speakers, voices)  # enrolled over HTTP
        self.stream_factory = self._voices.wrap(self.stream_factory)
        self._hls = HlsPlaylists(config, self.hub, self.delivery, self.refusals)
        self._gate = RequestGate(
            config, self.metrics, self.rlog, self.refusals, closing=self._shutting, route=self._http
        )
        # what a session may ask of the server: its port, nothing else (`services.py`)
        self._publisher_services = PublisherServices(
            config,
            self.hub,
            self.metrics,
            self.rlog,
            refuse=self.refusals.refuse,
            claim=self._publishers.claim,
            stream_factory=self.stream_factory,
            caption_callback=self.delivery.caption_callback,
            pace_callback=self.delivery.pace_callback,
            streams_changed=self.streams_changed,
            publisher_left=self.delivery.publisher_left,
            stream_closed=self.delivery.stream_closed,
        )
        self._viewer_services = ViewerServices(
            config,
            self.hub,
            self.metrics,
            self.rlog,
            refuse=self.refusals.refuse,
            replay=self.delivery.replay,
            viewer_done=self.viewer_done,
        )
        self.started_at = time.time()

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        cfg = self.config
        if cfg.record_dir is not None:
            cfg.record_dir.mkdir(parents=True, exist_ok=True)
        asyncio.get_running_loop().set_exception_handler(self._loop_exception)
        self.sinks.start()
        await self._voices.load()  # those a recorded server kept
        tls = self._ssl_context()
        self._server = await serve(
            self._handler,
            cfg.host,
            cfg.port,
            process_request=self._gate.process_request,
            ssl=tls,
            max_size=2 * cfg.max_frame_bytes,  # bigger frames get protocol.py's clear 1009
            compression=None,  # PCM does not compress; deflate would only cost CPU
            ping_interval=cfg.ping_interval_s,
            ping_timeout=cfg.ping_timeout_s,
            server_header="streamcap",
            create_connection=counted_connection(  # who may send a voice sample: `voices.py`
                self.connections, self.refusals, cfg.handshake_timeout_s, self._voices.may_upload
            ),
            # No overall handshake deadline: it would cut a long subtitle download (a response
            # is part of the handshake). `counted_connection` gives each connection
            # `handshake_timeout_s` to send its request, and a response its own close timeout.
            open_timeout=None,
            ssl_handshake_timeout=cfg.handshake_timeout_s if tls is not None else None,
        )

    def _ssl_context(self) -> ssl.SSLContext | None:
        cfg = self.config
        if cfg.ssl_context is not None:  # built (and checked) by the caller: keys read once
            return cfg.ssl_context
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

    def _shutting(self) -> bool:
        """`close` has begun: no new publisher, no new WebSocket."""
        return self._closing

    async def close(self) -> None:
        """Graceful shutdown: stop accepting, finalise every open utterance, deliver the finals
        to connected viewers, then close everything (1001)."""
        if self._server is None or self._closing:
            return
        self._closing = True
        self._server.server.close()  # stop listening; open connections stay
        cfg = self.config
        sessions = list(self._publishers.sessions)
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
        await self.delivery.close(self.hub.entries())
        await self.sinks.aclose()  # after the last finals reached the logs (and the sinks)

    # ------------------------------------------------------------------ HTTP

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
            return self._gate.metrics_page(request, connection)
        if path.rstrip("/") in ("/ingest", "/captions"):
            return routes.text(HTTPStatus.UPGRADE_REQUIRED, "this path needs a WebSocket")
        m = NAMES_RE.fullmatch(path)
        if m:  # renames (`names.py`)
            return self._names.response(m.group(1), request, connection)
        m = VOICES_RE.fullmatch(path)
        if m:  # voices enrolled from a recording (`voices.py`)
            return self._voices.response(m.group(1), request, connection)
        m = HLS_RE.fullmatch(path)
        if m:  # the captions as a live HLS subtitle rendition (`hls.py`)
            return self._hls.response(m.group(1), m.group(2), m.group(3), request, connection)
        m = routes.SUBTITLE_RE.fullmatch(path)
        if m:
            return self._subtitles.response(m.group(1), m.group(2), request, connection)
        return routes.text(HTTPStatus.NOT_FOUND, "not found")

    # ------------------------------------------------------------------ WebSocket

    async def _handler(self, ws: ServerConnection) -> None:
        assert ws.request is not None
        try:
            route, params = parse_ws_path(ws.request.path)
        except ProtocolError as e:
            await self.refusals.refuse(ws, e, "bad_path")
            return
        self.metrics.connections.labels(route).inc()
        token = extract_token(params, ws.request.headers.get)
        expected = self.config.publish_token if route == "ingest" else self.config.view_token
        if not check_token(expected, token):
            what = "publish" if route == "ingest" else "view"
            msg = f"missing {what} token" if token is None else f"wrong {what} token"
            await self.refusals.refuse(ws, ProtocolError(CloseCode.POLICY_VIOLATION, msg), "auth")
            return
        if route == "ingest":  # a publisher is authenticated once its start claims a place
            try:
                speaker = parse_speaker(params["speaker"]) if params.get("speaker") else ""
            except ProtocolError as e:
                await self.refusals.refuse(ws, e, "bad_path")
                return
            await self._ingest(ws, params["stream"], speaker)
        else:
            authenticated(ws)
            address = peer_address(ws)
            why = self._viewer_share.refusal(address)
            if why is not None and self.hub.viewers < self.config.max_viewers:  # else: the limit
                err = ProtocolError(CloseCode.POLICY_VIOLATION, why)
                await self.refusals.refuse(ws, err, "limit", params["stream"])
                return
            with self._viewer_share.hold(address):
                await serve_viewer(
                    self._viewer_services,
                    ws,
                    params["stream"],
                    int(params["since"]),
                    params.get("epoch"),
                )

    async def _ingest(self, ws: ServerConnection, stream: str, speaker: str = "") -> None:
        address = peer_address(ws)
        refused = self._publishers.refusal_at_connect(stream, speaker, address)
        if refused is not None:
            await self.refusals.refuse(ws, refused[0], refused[1], stream)
            return
        session = IngestSession(self._publisher_services, ws, stream, speaker)
        self._guard(session, address)
        self._publishers.opened(session)
        try:
            await session.run()
        finally:  # its place, if its start claimed one
            self._publishers.closed(session)

    def _guard(self, session: IngestSession, address: str) -> None:
        """Flood guards beyond the session's own messages: its ping and pong frames count
        against `--max-frame-rate`, and on an open server every publisher of one address
        spends one real-time budget of audio (a client that reconnects gets no new burst)."""
        if self._audio_by_address is not None:
            session.state.share_audio(self._audio_by_address.of(address))
        count_control_frames(
            session.ws,
            session.state.receive_control,
            lambda e: self.refusals.refuse(session.ws, e, "flood", session.stream),
        )

    # ---- capacity (admission control: `core.capacity`, measured by the worker)

    def _live_rooms(self) -> set[str]:
        """Streams with a publisher: the talk channels admission charges (`core.capacity`)."""
        return {session.stream for session in self._publishers}

    def full(self, stream: str | None = None) -> str | None:
        """Why a new publisher (of ``stream``) would be refused now, or None when it would be
        admitted. A publisher joining a room that is live shares its talking time. Refused at
        once while a live stream is behind (load shedding paused its partials, `core.load_shed`:
        what the worker measures now, issue 38), else as the worker's meter says."""
        if not self.config.admission:
            return None
        rooms = self._live_rooms()
        if (behind := self.hub.behind()) is not None:  # measured now: the worker is full
            return behind
        decision = self.worker.admission(len(rooms), stream in rooms)
        return None if decision.ok else str(decision.reason)

    def streams_changed(self) -> None:
        """Tell the worker's meter how many talk channels (rooms with a publisher) are live."""
        self.worker.streams_changed(self.hub.rooms_publishing)

    def _worker_metrics(self) -> WorkerFigures:
        """The worker as /metrics publishes it: its books, load, batches, and the admission
        decision for the rooms live now (within ``--max-streams``; admission off: accepting)."""
        decision = self.worker.admission(len(self._live_rooms()))
        return WorkerFigures(
            stats=self.worker.total_stats(),
            load=self.worker.load(),
            admission=decision,
            capacity_streams=min(decision.capacity, self.config.max_streams),
            accepting=decision.ok or not self.config.admission,
            batches=self.worker.batch_figures(),
        )


async def _wait_events(events: list[asyncio.Event], timeout: float) -> None:
    waiters = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait(waiters, timeout=timeout)
    finally:
        for w in waiters:
            w.cancel()
