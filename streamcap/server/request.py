"""What a client's request asks for before its first message: its route, stream, cursor, token.

Its own module because the server reads these from the HTTP request itself (the WebSocket
handshake's path and headers, a subtitle download's URL), before any protocol message, and
answers with a close code when they are wrong; the messages that follow are `protocol`'s.
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Callable, Mapping
from typing import Literal
from urllib.parse import parse_qsl, urlsplit

from .client_text import plain
from .close import CloseCode, ProtocolError
from .close import bad_data as _bad

Route = Literal["ingest", "captions"]

#: Stream ids: they name files in `--record DIR`, so no leading "." (hidden files, "..").
STREAM_ID_RE = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,63}")
#: Identity of one caption log (see `resume_cursor`).
EPOCH_RE = re.compile(r"[A-Za-z0-9_-]{1,32}")
_SINCE_RE = re.compile(r"[0-9]{1,18}")


def _single_params(query: str) -> dict[str, str]:
    params: dict[str, str] = {}
    for key, value in parse_qsl(query, keep_blank_values=True):
        for text in (key, value):
            if not plain(text):
                raise ProtocolError(
                    CloseCode.POLICY_VIOLATION,
                    f"query parameter {ascii(key)[:40]} holds a control character or text that "
                    "is not well-formed Unicode",
                )
        if key in params:
            raise ProtocolError(
                CloseCode.POLICY_VIOLATION, f"query parameter {key!r} given more than once"
            )
        params[key] = value
    return params


def parse_ws_path(path: str) -> tuple[Route, dict[str, str]]:
    """Route and validated query parameters of a WebSocket request path.

    `stream` is required: 1-64 characters from `A-Za-z0-9_.-`, not starting with ".". For
    /captions `since` is always present afterwards ("0" if absent), as a canonical
    non-negative integer string, and `epoch`, if given, must be an epoch as events carry it.
    Unknown parameters are kept and ignored (cache busters and the like).
    """
    parts = urlsplit(path)
    route_path = parts.path.rstrip("/")
    if route_path == "/ingest":
        route: Route = "ingest"
    elif route_path == "/captions":
        route = "captions"
    else:
        raise ProtocolError(
            CloseCode.POLICY_VIOLATION, f"unknown path {parts.path!r}: use /ingest or /captions"
        )
    params = _single_params(parts.query)
    stream = params.get("stream")
    if stream is None:
        raise ProtocolError(CloseCode.POLICY_VIOLATION, "missing 'stream' query parameter")
    if not STREAM_ID_RE.fullmatch(stream):
        raise ProtocolError(
            CloseCode.POLICY_VIOLATION,
            f"invalid stream id {stream[:80]!r}: use 1-64 characters from A-Z a-z 0-9 _ . - "
            "(not starting with '.')",
        )
    if route == "captions":
        since = params.get("since", "0")
        if not _SINCE_RE.fullmatch(since):
            raise _bad(f"'since' must be a non-negative integer, got {since[:40]!r}")
        params["since"] = str(int(since))
        epoch = params.get("epoch")
        if epoch is not None and epoch != "" and not EPOCH_RE.fullmatch(epoch):
            raise _bad(f"'epoch' must be an epoch as caption events carry it, got {epoch[:40]!r}")
    return route, params


def resume_cursor(since: int, epoch: str | None, log_epoch: str, last_seq: int) -> int:
    """Where a viewer's replay starts: it gets every stored event with a seq above this.

    A `since` counts only in the log it came from. Every log has an epoch (new when the log is
    created, kept when the server reloads it from `--record DIR`), and every event carries it.
    A viewer whose `epoch` is another log's, or whose `since` lies beyond this log's last seq
    (it cannot come from this log), gets the whole current log; without `epoch` a `since` up
    to the last seq is trusted.
    """
    if epoch and epoch != log_epoch:
        return 0
    if since > last_seq:
        return 0
    return since


def extract_token(
    params: Mapping[str, str], headers_get: Callable[[str], str | None]
) -> str | None:
    """Token from `?token=` (browsers cannot set headers) or else `Authorization: Bearer`."""
    token = params.get("token")
    if token is not None:
        return token
    auth = headers_get("Authorization")
    if auth is None:
        return None
    scheme, _, value = auth.strip().partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        return None
    return value.strip()


def check_token(expected: str | None, given: str | None) -> bool:
    """Constant-time comparison; `expected` None means the endpoint is open."""
    if expected is None:
        return True
    if given is None:
        return False
    # surrogatepass: a header or query value may hold raw bytes (surrogate escapes)
    return hmac.compare_digest(
        expected.encode("utf-8", "surrogatepass"), given.encode("utf-8", "surrogatepass")
    )
