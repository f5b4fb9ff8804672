"""The caption server: asyncio I/O around the sans-I/O protocol (`protocol.py`).

One port serves WebSocket `/ingest` (publishers) and `/captions` (viewers), and plain HTTP
(`routes.py`) for the pages, static files, `/healthz`, `/metrics` and `/streams/<id>.srt|.vtt`.
Audio is decoded and resampled on the event loop (cheap) and handed to one `LiveStream` per
publisher session; captions come back from the worker thread through `call_soon_threadsafe`, are
numbered into the stream's `CaptionLog` (`hub.py`), recorded, and fanned out to viewers.

Unknown streams: by default a viewer of a stream that has no publisher yet stays connected and
waits (an OBS overlay is usually opened before the stream starts, and a viewer whose publisher
reconnects should not notice); `unknown_stream="reject"` closes it with 1008 instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import time
from collections.abc import Callable
from http import HTTPStatus
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import parse_qsl, urlsplit

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from streamcap.audio.resample import StreamResampler
from streamcap.captions import Caption, CaptionWriter, JsonlWriter, render_srt, render_vtt

from . import routes
from .config import LiveStreamLike, ServerConfig, StreamFactory, live_stream_factory
from .hub import Hub, StreamEntry, Viewer
from .metrics import CONTENT_TYPE, ServerMetrics, worker_snapshot
from .protocol import (
    STREAM_ID_RE,
    CloseCode,
    IngestState,
    ProtocolError,
    StartMessage,
    check_token,
    error_message,
    extract_token,
    parse_ws_path,
    ready_message,
)

__all__ = ["CaptionServer", "ServerConfig", "StreamFactory", "live_stream_factory"]

log = logging.getLogger(__name__)


class _AppendingJsonl(JsonlWriter):
    """JSONL of finals appended to (a path given to `JsonlWriter` would be truncated)."""

    def __init__(self, path: Path) -> None:
        self._owned: TextIO = open(path, "a", encoding="utf-8", newline="\n")  # noqa: SIM115
        super().__init__(self._owned)

    def close(self) -> None:
        super().close()
        self._owned.close()


def _label(err: ProtocolError, default: str) -> str:
    if err.code == CloseCode.MESSAGE_TOO_BIG:
        return "too_big"
    if err.code == CloseCode.UNSUPPORTED_DATA:
        return "bad_data"
    return default


class CaptionServer:
    """One server instance: `await start()`, `await close()` (or `serve_forever()`)."""

    def __init__(
        self,
        config: ServerConfig,
        worker: Any,
        stream_factory: StreamFactory | None = None,
    ) -> None:
        self.config = config
        self.worker = worker
        self._factory = stream_factory or live_stream_factory(
            worker, default_language=config.default_language
        )
        self.hub = Hub(retain=config.retain_streams, max_finals=config.max_finals)
        self.metrics = ServerMetrics(self.hub.snapshot, lambda: worker_snapshot(self.worker))
        self.web_dir = config.web_dir or routes.default_web_dir()
        self._writers: dict[str, CaptionWriter] = {}
        self._server: Server | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.started_at = time.time()

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        cfg = self.config
        if cfg.record_dir is not None:
            cfg.record_dir.mkdir(parents=True, exist_ok=True)
        self._loop = asyncio.get_running_loop()
        self._server = await serve(
            self._handler,
            cfg.host,
            cfg.port,
            process_request=self._process_request,
            ssl=self._ssl_context(),
            max_size=2 * cfg.max_frame_bytes,  # bigger frames get protocol.py's clear 1009
            compression=None,  # PCM does not compress; deflate would only cost CPU
            ping_interval=cfg.ping_interval_s,
            server_header="streamcap",
        )

    def _ssl_context(self) -> ssl.SSLContext | None:
        cfg = self.config
        if cfg.tls_cert is None or cfg.tls_key is None:
            return None
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cfg.tls_cert, cfg.tls_key)
        return ctx

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
        """Stop accepting; publishers' open utterances are finalised before their handlers end."""
        if self._server is not None:
            self._server.close(close_connections=True)
            await self._server.wait_closed()
        for w in self._writers.values():
            w.close()
        self._writers.clear()

    # ------------------------------------------------------------------ HTTP

    def _origin_ok(self, request: Request) -> bool:
        origins = request.headers.get_all("Origin")
        if not origins:
            return True  # not a browser: the token is the guard
        if len(origins) > 1:
            return False
        origin = origins[0]
        allowed = self.config.allowed_origins
        if "*" in allowed or origin in allowed:
            return True
        parts = urlsplit(origin)
        hosts = request.headers.get_all("Host")
        return (
            parts.scheme in ("http", "https")
            and len(hosts) == 1
            and parts.netloc.lower() == hosts[0].strip().lower()
        )

    def _process_request(self, connection: ServerConnection, request: Request) -> Response | None:
        path = urlsplit(request.path).path
        upgrade = request.headers.get_all("Upgrade")
        if any(u.lower() == "websocket" for u in upgrade):
            if path.rstrip("/") not in ("/ingest", "/captions"):
                self.metrics.refuse("bad_path")
                return routes.text(HTTPStatus.NOT_FOUND, "WebSocket paths: /ingest, /captions")
            if not self._origin_ok(request):
                self.metrics.refuse("origin")
                return routes.text(HTTPStatus.FORBIDDEN, "origin not allowed")
            return None
        resp = self._http(path, request)
        self.metrics.http_requests.labels(str(resp.status_code)).inc()
        return resp

    def _http(self, path: str, request: Request) -> Response:
        if path in routes.PAGES:
            return routes.static_file(self.web_dir, routes.PAGES[path])
        if path.startswith("/static/"):
            return routes.static_file(self.web_dir, path[len("/static/") :])
        if path == "/healthz":
            return routes.text(HTTPStatus.OK, "ok")
        if path == "/metrics":
            return routes.response(HTTPStatus.OK, self.metrics.render(), CONTENT_TYPE)
        if path.rstrip("/") in ("/ingest", "/captions"):
            return routes.text(HTTPStatus.UPGRADE_REQUIRED, "this path needs a WebSocket")
        m = routes.SUBTITLE_RE.fullmatch(path)
        if m:
            return self._subtitles(m.group(1), m.group(2), request)
        return routes.text(HTTPStatus.NOT_FOUND, "not found")

    def _subtitles(self, stream: str, kind: str, request: Request) -> Response:
        params = dict(parse_qsl(urlsplit(request.path).query))
        if not check_token(self.config.view_token, extract_token(params, request.headers.get)):
            return routes.text(HTTPStatus.UNAUTHORIZED, "missing or wrong view token")
        entry = self.hub.get(stream)
        if entry is None or not entry.started:
            return routes.text(HTTPStatus.NOT_FOUND, f"unknown stream {stream!r}")
        finals = entry.log.finals()
        render = render_vtt if kind == "vtt" else render_srt
        return routes.subtitles(kind, lambda: render(finals), stream)

    # ------------------------------------------------------------------ WebSocket

    async def _refuse(self, ws: ServerConnection, err: ProtocolError, label: str) -> None:
        self.metrics.refuse(label)
        try:
            await ws.send(error_message(err.code, err.reason))
            await ws.close(err.code, err.close_reason)
        except ConnectionClosed:
            pass

    async def _handler(self, ws: ServerConnection) -> None:
        assert ws.request is not None
        try:
            route, params = parse_ws_path(ws.request.path)
        except ProtocolError as e:
            await self._refuse(ws, e, "bad_path")
            return
        self.metrics.connections.labels(route).inc()
        token = extract_token(params, ws.request.headers.get)
        expected = self.config.publish_token if route == "ingest" else self.config.view_token
        if not check_token(expected, token):
            what = "publish" if route == "ingest" else "view"
            msg = f"missing {what} token" if token is None else f"wrong {what} token"
            await self._refuse(ws, ProtocolError(CloseCode.POLICY_VIOLATION, msg), "auth")
            return
        if route == "ingest":
            await self._ingest(ws, params["stream"])
        else:
            await self._captions(ws, params["stream"], int(params["since"]))

    # ---- ingest

    async def _ingest(self, ws: ServerConnection, stream: str) -> None:
        cfg = self.config
        existing = self.hub.get(stream)
        if existing is not None and existing.publishing:
            err = ProtocolError(
                CloseCode.POLICY_VIOLATION, f"stream {stream!r} already has a publisher"
            )
            await self._refuse(ws, err, "busy")
            return
        if self.hub.publishing >= cfg.max_streams:
            err = ProtocolError(
                CloseCode.POLICY_VIOLATION, f"server is at its limit of {cfg.max_streams} streams"
            )
            await self._refuse(ws, err, "limit")
            return
        entry = self.hub.entry(stream)
        entry.begin_session()
        state = IngestState(max_frame_bytes=cfg.max_frame_bytes, burst_s=cfg.burst_s)
        live: LiveStreamLike | None = None
        resampler: StreamResampler | None = None
        stopped = False
        try:
            while True:
                try:
                    msg = await asyncio.wait_for(ws.recv(), cfg.idle_timeout_s)
                except asyncio.TimeoutError:
                    err = ProtocolError(
                        CloseCode.POLICY_VIOLATION, f"nothing received for {cfg.idle_timeout_s:g} s"
                    )
                    await self._refuse(ws, err, "idle")
                    return
                except ConnectionClosed:
                    return  # gone (abrupt or not): `finally` still finalises the utterance
                if isinstance(msg, str):
                    m = state.receive_text(msg)
                    if isinstance(m, StartMessage):
                        live = self._factory(stream, m, self._caption_callback(entry))
                        resampler = StreamResampler(m.sample_rate)
                        await ws.send(ready_message(stream, m.sample_rate))
                        continue
                    stopped = True  # `finally` finalises, then closes normally
                    return
                now = time.monotonic()
                samples = state.receive_bytes(msg, now)
                assert live is not None and resampler is not None and state.start is not None
                self.metrics.audio_seconds.inc(len(samples) / state.start.sample_rate)
                out = resampler.process(samples)
                if out.size:
                    live.feed(out)
        except ProtocolError as e:
            await self._refuse(ws, e, _label(e, "flood"))
        except Exception:
            log.exception("ingest %s failed", stream)
            err = ProtocolError(CloseCode.INTERNAL_ERROR, "internal server error")
            await self._refuse(ws, err, "internal")
        finally:
            await self._finish(live, resampler)
            entry.end_session(state.audio_seconds)
            writer = self._writers.pop(stream, None)
            if writer is not None:
                writer.close()
            self.hub.release(entry)
            if stopped:  # every final of the stream is out: the client may rely on that
                with contextlib.suppress(ConnectionClosed):
                    await ws.close(CloseCode.NORMAL_CLOSURE, "stopped")

    async def _finish(self, live: LiveStreamLike | None, resampler: StreamResampler | None) -> None:
        """Flush the resampler, finalise the open utterance, wait until its final is out."""
        if live is None:
            return
        try:
            if resampler is not None:
                tail = resampler.flush()
                if tail.size:
                    live.feed(tail)
            live.finish()
            await asyncio.to_thread(live.wait_idle, self.config.finish_timeout_s)
        except Exception:
            log.exception("finishing a stream failed")
        # Captions the worker posted before it went idle are queued ahead of us: let them run.
        await asyncio.sleep(0)

    def _caption_callback(self, entry: StreamEntry) -> Callable[[Caption], None]:
        loop = self._loop
        assert loop is not None

        def on_caption(cap: Caption) -> None:  # worker thread
            with contextlib.suppress(RuntimeError):  # the loop is closed at shutdown
                loop.call_soon_threadsafe(self._deliver, entry, cap)

        return on_caption

    def _deliver(self, entry: StreamEntry, cap: Caption) -> None:
        out = entry.add(cap)
        self.metrics.captions.labels(out.type).inc()
        if out.type == "final":
            self.metrics.final_latency.observe(max(0.0, out.latency_ms) / 1000.0)
            self._record(out)

    def _record(self, cap: Caption) -> None:
        rec = self.config.record_dir
        if rec is None or not STREAM_ID_RE.fullmatch(cap.stream):
            return
        writer = self._writers.get(cap.stream)
        try:
            if writer is None:
                writer = self._writers[cap.stream] = _AppendingJsonl(rec / f"{cap.stream}.jsonl")
            writer.write(cap)
        except OSError:
            log.exception("recording %s failed", cap.stream)

    # ---- captions

    async def _captions(self, ws: ServerConnection, stream: str, since: int) -> None:
        cfg = self.config
        entry = self.hub.get(stream)
        if cfg.unknown_stream == "reject" and (entry is None or not entry.started):
            err = ProtocolError(CloseCode.POLICY_VIOLATION, f"unknown stream {stream!r}")
            await self._refuse(ws, err, "unknown_stream")
            return
        if self.hub.viewers >= cfg.max_viewers:
            err = ProtocolError(
                CloseCode.POLICY_VIOLATION, f"server is at its limit of {cfg.max_viewers} viewers"
            )
            await self._refuse(ws, err, "limit")
            return
        entry = self.hub.entry(stream)
        # A `since` beyond the log is from before a server restart: replay all we have.
        viewer = Viewer(min(since, entry.log.last_seq))
        entry.viewers.add(viewer)
        viewer.wake.set()
        sender = asyncio.create_task(self._send_loop(ws, entry, viewer))
        reader = asyncio.create_task(self._drain(ws))
        try:
            await asyncio.wait({sender, reader}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in (sender, reader):
                t.cancel()
            await asyncio.gather(sender, reader, return_exceptions=True)
            entry.viewers.discard(viewer)
            self.hub.release(entry)

    async def _drain(self, ws: ServerConnection) -> None:
        """Viewers have nothing to say; read (and ignore) until the connection closes."""
        try:
            async for _ in ws:
                pass
        except ConnectionClosed:
            pass

    async def _send_loop(self, ws: ServerConnection, entry: StreamEntry, viewer: Viewer) -> None:
        timeout = self.config.viewer_send_timeout_s
        while True:
            await viewer.wake.wait()
            viewer.wake.clear()
            for cap in entry.log.since(viewer.cursor):
                try:
                    await asyncio.wait_for(ws.send(cap.to_json()), timeout)
                except asyncio.TimeoutError:
                    reason = f"viewer too slow; reconnect with since={viewer.cursor}"
                    err = ProtocolError(CloseCode.POLICY_VIOLATION, reason)
                    await self._refuse(ws, err, "slow_viewer")
                    return
                except ConnectionClosed:
                    return
                viewer.cursor = cap.seq
                self.metrics.events_sent.inc()
