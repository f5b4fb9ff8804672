"""Posting captions over HTTP the way YouTube Live and Zoom take them: one caption per POST to
a URL the service gave out, numbered by a ``seq`` query parameter that grows by one per new
caption and stays the same for a retry, retried with backoff a bounded number of times.

The standard library's `http.client`, on one thread of the sink's own (a thread pool of one):
no HTTP library is among streamcap's dependencies, and the event loop's default executor is
where subtitle files and recordings are made, so a service that never answers must not hold
one of its threads. A request has a timeout (`RetryPolicy.timeout_s`), and a request that runs
past it all the same (a server that trickles bytes) has its socket shut from the loop.

The URL is a secret (its query is the key to the broadcast): nothing here puts it, or an
exception that may quote it, into a message; failures say the status or the exception's type.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import socket
import ssl
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from urllib.parse import quote, urlsplit

from streamcap.core.captions import Caption

from .base import SinkError

__all__ = ["Answer", "HttpPoster", "RetryPolicy", "check_http_url", "spoken_text", "with_query"]


@dataclass(frozen=True)
class RetryPolicy:
    """How a caption is posted: at most `tries` times, waiting `first_wait_s` after the
    first failure and twice as long after each next (at most `max_wait_s`), each request
    given `timeout_s`."""

    tries: int = 5
    first_wait_s: float = 0.5
    max_wait_s: float = 8.0
    timeout_s: float = 10.0

    def __post_init__(self) -> None:
        if self.tries < 1 or self.timeout_s <= 0 or self.first_wait_s < 0:
            raise ValueError("tries >= 1, timeout_s > 0 and first_wait_s >= 0, please")

    @classmethod
    def of(cls, options: tuple[tuple[str, str], ...]) -> RetryPolicy:
        """The policy a sink's options ask for (``tries``, ``timeout``: seconds; the rest as
        the defaults); ValueError for a value that is not a number."""
        given = dict(options)
        try:
            tries = int(given.get("tries", cls.tries))
            timeout = float(given.get("timeout", cls.timeout_s))
        except ValueError:
            raise ValueError("tries and timeout are numbers") from None
        return cls(tries=tries, timeout_s=timeout, first_wait_s=min(cls.first_wait_s, timeout))

    def wait_s(self, failures: int) -> float:
        """The wait before the next try after `failures` failed ones (1, 2, ...)."""
        return float(min(self.max_wait_s, self.first_wait_s * 2 ** (failures - 1)))


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes


def check_http_url(url: str) -> None:
    """ValueError (not quoting the URL) unless `url` is an http(s) URL with a host."""
    try:
        parts = urlsplit(url)
        port = parts.port  # ValueError for a port that is not a number
    except ValueError:
        raise ValueError("is not a URL") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("must be an http:// or https:// URL with a host")
    if port == 0 or any(c.isspace() for c in url):
        raise ValueError("is not a URL")


def with_query(url: str, **params: str) -> str:
    """`url` with each of `params` set in its query (an existing one replaced), the rest of
    the query kept byte for byte (a signature must reach the service as it was given)."""
    base, _, fragment = url.partition("#")
    path, _, query = base.partition("?")
    kept = [p for p in query.split("&") if p and p.split("=", 1)[0] not in params]
    kept += [f"{k}={quote(v, safe='')}" for k, v in params.items()]
    return f"{path}?{'&'.join(kept)}" + (f"#{fragment}" if fragment else "")


def spoken_text(caption: Caption) -> str:
    """What a caption service is sent: the text, after who spoke ("Mary: ...") when known."""
    text = " ".join(caption.text.split())
    return f"{caption.speaker}: {text}" if caption.speaker else text


class HttpPoster:
    """One sink's HTTP requests, on its own thread (see the module docstring)."""

    def __init__(self, name: str, retry: RetryPolicy | None = None) -> None:
        self.retry = retry or RetryPolicy()
        self._pool = ThreadPoolExecutor(1, thread_name_prefix=f"sink-{name}"[:40])
        self._conn: http.client.HTTPConnection | None = None
        #: tries that failed and were tried again, over the sink's life
        self.retried = 0

    async def post(self, url: str, body: bytes, content_type: str) -> Answer:
        """POST until a 2xx answer, at most `retry.tries` times; `SinkError` after the last
        (its message: the last status or exception type)."""
        last = ""
        for attempt in range(self.retry.tries):
            if attempt:
                self.retried += 1
                await asyncio.sleep(self.retry.wait_s(attempt))
            try:
                answer = await self.request("POST", url, body, content_type)
            except (OSError, http.client.HTTPException, asyncio.TimeoutError) as e:
                last = type(e).__name__
                continue
            if 200 <= answer.status < 300:
                return answer
            last = f"HTTP {answer.status}"
        raise SinkError(f"{last} after {self.retry.tries} tries")

    async def request(
        self, method: str, url: str, body: bytes | None = None, content_type: str = ""
    ) -> Answer:
        """One request on the sink's thread, within its timeout (then its socket is shut)."""
        loop = asyncio.get_running_loop()
        timeout = self.retry.timeout_s
        call: Callable[[], Answer] = lambda: self._send(method, url, body, content_type, timeout)  # noqa: E731
        future = loop.run_in_executor(self._pool, call)
        try:
            return await asyncio.wait_for(asyncio.shield(future), timeout * 2)
        except (asyncio.TimeoutError, asyncio.CancelledError):
            self._abort()  # the thread's read ends now; the thread is free for the next
            raise

    def _send(
        self, method: str, url: str, body: bytes | None, content_type: str, timeout: float
    ) -> Answer:
        parts = urlsplit(url)
        target = parts.path or "/"
        if parts.query:
            target += "?" + parts.query
        conn: http.client.HTTPConnection
        if parts.scheme == "https":
            ctx = ssl.create_default_context()
            conn = http.client.HTTPSConnection(
                parts.hostname or "", parts.port, timeout=timeout, context=ctx
            )
        else:
            conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=timeout)
        self._conn = conn
        try:
            headers = {"Content-Type": content_type} if content_type else {}
            conn.request(method, target, body=body, headers=headers)
            resp = conn.getresponse()
            return Answer(resp.status, resp.read(64 * 1024))
        finally:
            self._conn = None
            conn.close()

    def _abort(self) -> None:
        conn = self._conn
        sock = conn.sock if conn is not None else None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    async def aclose(self) -> None:
        self._abort()
        self._pool.shutdown(wait=False, cancel_futures=True)
