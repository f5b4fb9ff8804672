"""A small request body for plain HTTP POSTs on the WebSocket port (`POST /streams/ID/names`).

websockets parses only a handshake: a request with a body (any ``Content-Length`` but 0) is not
even answered, the connection just closes. Renaming a speaker is one HTTP call with a JSON body
(`names.py`), so the server's connections read one: `read_bodies` gives a connection's protocol
a request parser that is websockets' own (`Request.parse`'s steps, its line and header limits,
its answers to a request line or headers too long) except that a POST may carry up to
`MAX_BODY_BYTES` (as may PUT or DELETE, to be told 405; a voice sample posted to
`/streams/ID/voices`, `voices.py`: `MAX_SAMPLE_BYTES`), read before the request reaches the
server's routes (`BodyRequest.body`). A
bigger one is not kept: up to `MAX_DISCARD_BYTES` of it are read and dropped (so that the client,
still sending, reads the 413 that follows instead of a reset), a bigger one still is answered
at once. A body that is slow to come counts against the connection's handshake deadline
(`accept.counted_connection`), as a slow request does. Anything else (GET, the WebSocket
handshake) is parsed exactly as before; ``Transfer-Encoding`` is refused as websockets
refuses it (the connection closes).
"""

from __future__ import annotations

import dataclasses
import http
import re
from collections.abc import Callable, Generator

from websockets.exceptions import (
    HeaderLineTooLong,
    InvalidMessage,
    RequestLineTooLong,
    TooManyHeaders,
)
from websockets.http11 import Request, parse_headers, parse_line
from websockets.protocol import Protocol
from websockets.server import ServerProtocol

#: The largest POST body kept (a rename of 64 labels of 32 characters fits many times).
MAX_BODY_BYTES = 16 * 1024
#: A bigger body is read and dropped up to this much, then answered 413.
MAX_DISCARD_BYTES = 1 << 20
#: The one bigger body kept: a voice sample, `POST /streams/ID/voices` (`voices.py`): 30 s of
#: 16 kHz mono 16-bit PCM in a WAV file; up to 4 times as much is read and dropped (413).
MAX_SAMPLE_BYTES = 1 << 20
_SAMPLE_PATH = re.compile(r"/streams/[^/?#]+/voices(?:\?[^#]*)?")
_CHUNK = 64 * 1024


@dataclasses.dataclass
class BodyRequest(Request):
    """A request with the body it carried (not GET); ``body_bytes``: its declared length,
    `body` empty when that is over `MAX_BODY_BYTES` (answer 413)."""

    body: bytes = b""
    body_bytes: int = 0


def _content_length(request: Request) -> int:
    values = set(request.headers.get_all("Content-Length"))
    if not values:
        return 0
    if len(values) > 1 or not all(v.isdigit() and len(v) <= 18 for v in values):
        raise ValueError("invalid Content-Length")
    return int(values.pop())


#: Whether a request (its line and headers read) may send a voice sample's body: the client
#: may enrol (`voices.Voices.may_upload`); another's big body is read and dropped, unkept.
KeepsSample = Callable[[BodyRequest], bool]


def _parse_request(
    protocol: ServerProtocol, keeps_sample: KeepsSample | None = None
) -> Generator[None, None, BodyRequest]:
    """`Request.parse` (websockets 17), with a POST's body read after its headers."""
    read_line = protocol.reader.read_line
    try:
        line = yield from parse_line(read_line, RequestLineTooLong)
    except EOFError as exc:
        raise EOFError("connection closed while reading HTTP request line") from exc
    try:
        raw_method, raw_path, raw_protocol = line.split(b" ", 2)
    except ValueError:
        raise ValueError("invalid HTTP request line") from None
    if raw_protocol not in (b"HTTP/1.1", b"HTTP/1.0"):
        raise ValueError("unsupported protocol; expected HTTP/1.1 or HTTP/1.0")
    request = BodyRequest(
        raw_path.decode("ascii"),
        (yield from parse_headers(read_line)),
        raw_method.decode("ascii"),
        raw_protocol.decode("ascii"),
    )
    if "Transfer-Encoding" in request.headers:
        raise NotImplementedError("transfer codings aren't supported")
    n = _content_length(request)
    if n and request.method in ("GET", "HEAD"):  # a handshake has none: as websockets does
        raise ValueError("unsupported request body")
    request.body_bytes = n
    keep, discard = MAX_BODY_BYTES, MAX_DISCARD_BYTES
    if request.method == "POST" and _SAMPLE_PATH.fullmatch(request.path):
        discard = 4 * MAX_SAMPLE_BYTES
        if keeps_sample is not None and keeps_sample(request):  # before a byte of it is kept
            keep = MAX_SAMPLE_BYTES
    if 0 < n <= keep:
        request.body = bytes((yield from protocol.reader.read_exact(n)))
    elif keep < n <= discard:
        while n > 0:  # read and dropped: the client reads the 413 instead of a reset
            n -= len((yield from protocol.reader.read_exact(min(n, _CHUNK))))
    return request


def _parse(protocol: ServerProtocol, keeps_sample: KeepsSample | None) -> Generator[None]:
    """`ServerProtocol.parse` with `_parse_request` for `Request.parse`."""
    try:
        request = yield from _parse_request(protocol, keeps_sample)
    except (RequestLineTooLong, HeaderLineTooLong, TooManyHeaders) as exc:
        protocol.handshake_exc = exc
        status = (
            http.HTTPStatus.REQUEST_URI_TOO_LONG
            if isinstance(exc, RequestLineTooLong)
            else http.HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE
        )
        text = f"Failed to open a WebSocket connection: {exc}.\n"
        protocol.send_response(protocol.reject(status, text))
        yield
        return
    except Exception as exc:
        protocol.handshake_exc = InvalidMessage("did not receive a valid HTTP request")
        protocol.handshake_exc.__cause__ = exc
        protocol.send_eof()
        protocol.parser = protocol.discard()
        next(protocol.parser)
        yield
        return
    protocol.events.append(request)
    yield from Protocol.parse(protocol)


def read_bodies(protocol: ServerProtocol, keeps_sample: KeepsSample | None = None) -> None:
    """Give ``protocol`` (a new connection's, before any byte arrived) the parser above;
    ``keeps_sample``: who may post a voice sample (none: nobody)."""
    protocol.parser = _parse(protocol, keeps_sample)
    next(protocol.parser)
