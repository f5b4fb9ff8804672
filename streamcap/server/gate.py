"""The door every request comes through, before any route or stream sees it.

A request whose Host is not this server's is refused (DNS rebinding), a WebSocket handshake
needs one of our paths and an allowed Origin (`access.py`) and is refused during shutdown;
a plain request is answered by the server's routes and counted once, whether its response is
made on the loop or off it (subtitles), and a bug in a route costs one 500, not a traceback
per request. `/metrics` has its own access rule here too. Its own piece because these are the
rules of who may talk to the server at all, apart from what the server then says.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from http import HTTPStatus
from urllib.parse import parse_qsl, urlsplit

from websockets.asyncio.server import ServerConnection
from websockets.http11 import Request, Response

from . import access, routes
from .config import ServerConfig
from .metrics import CONTENT_TYPE, ServerMetrics
from .ratelog import RateLimitedLog
from .refusal import Refusals
from .request import check_token, extract_token

#: (path, request, connection) -> the response to a plain HTTP request, made now or later
Route = Callable[[str, Request, ServerConnection], Response | Awaitable[Response]]


class RequestGate:
    """`process_request` is websockets' hook: None lets a WebSocket handshake through."""

    def __init__(
        self,
        config: ServerConfig,
        metrics: ServerMetrics,
        rlog: RateLimitedLog,
        refusals: Refusals,
        *,
        closing: Callable[[], bool],
        route: Route,
    ) -> None:
        self.config = config
        self.metrics = metrics
        self.rlog = rlog
        self.refusals = refusals
        self._closing = closing
        self._route = route

    def process_request(
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
            self.refusals.refused(
                "host", f"Host {hosts[0][:60]!r} is not this server's" if hosts else ""
            )
            resp = routes.text(
                HTTPStatus.MISDIRECTED_REQUEST,
                "this server does not answer to that host name (see --allow-host)",
            )
            if not websocket:
                self.metrics.http_requests.labels(str(resp.status_code)).inc()
            return resp
        if websocket:
            if path.rstrip("/") not in ("/ingest", "/captions"):
                self.refusals.refused("bad_path")
                return routes.text(HTTPStatus.NOT_FOUND, "WebSocket paths: /ingest, /captions")
            if not access.origin_allowed(
                request.headers.get_all("Origin"), hosts, cfg.allowed_origins
            ):
                self.refusals.refused("origin")
                return routes.text(HTTPStatus.FORBIDDEN, "origin not allowed")
            if self._closing():
                return routes.text(HTTPStatus.SERVICE_UNAVAILABLE, "server shutting down")
            return None
        made = self._route(path, request, connection)
        if isinstance(made, Response):  # else counted by `_finish_request`
            self.metrics.http_requests.labels(str(made.status_code)).inc()
        return made

    def metrics_page(self, request: Request, connection: ServerConnection) -> Response:
        """`/metrics`, for those `access.metrics_allowed` lets in."""
        cfg = self.config
        params = dict(parse_qsl(urlsplit(request.path).query))
        token = extract_token(params, request.headers.get)
        has_token = cfg.metrics_token is not None
        peer = connection.remote_address[0] if connection.remote_address else None
        if not access.metrics_allowed(
            has_token and check_token(cfg.metrics_token, token), has_token, cfg.host, peer
        ):
            self.refusals.refused("auth", "metrics")
            if has_token:
                return routes.text(HTTPStatus.UNAUTHORIZED, "missing or wrong metrics token")
            return routes.text(HTTPStatus.FORBIDDEN, "metrics: loopback only (see --metrics-token)")
        return routes.response(HTTPStatus.OK, self.metrics.render(), CONTENT_TYPE)
