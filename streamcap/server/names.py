"""`/streams/ID/names`: rename a stream's speakers ("Speaker 2" -> "Mary") with one HTTP call,
and what a rename changes on the way out (issue 37, item 4).

``POST /streams/ID/names`` with a JSON body ``{"Speaker 2": "Mary"}`` (label -> name; ``""``
takes a rename back: `core.speaker_names`) answers 200 with the stream's whole map,
``{"stream": ID, "names": {...}}``; ``GET`` answers the same (the view token's). Who may rename:
the holder of the publish token, the token that lets audio into the stream (`--publish-token`,
as ``?token=`` or ``Authorization: Bearer``); on a server without one, only clients on this
machine (loopback), whatever address the server listens on: a rename is a write, and a server
without tokens is open to its network for audio, not for rewriting what its captions say. A
browser's request needs an allowed Origin (`access.origin_allowed`, as a WebSocket's: a page
elsewhere cannot rename through a visitor's browser on this machine). Names follow the rules
of a room publisher's name (`client_text.parse_speaker`: 1-32 characters, no look-alikes,
controls or markup). Refusals are one line: 400 (the body), 403 (token, origin), 404 (no such
stream), 405, 413 (a body over `http_body.MAX_BODY_BYTES`).

A rename never rewrites a caption: the stream's `hub.StreamEntry.names` changes, and the map is
applied where captions go out. Viewers get captions renamed (`renamed`: a renamed one carries
``speaker``, the name to show, and ``label``, the label it was given), replays too (a recorded
line sent as it is, `record_index.RecordedLine`, is re-encoded when its speaker is renamed),
subtitle files (`subtitles.py`, whose cache key holds the map); and viewers that asked
(``names=1``) are sent the whole map as a ``names`` message (no ``seq``, like ``status``) when
they connect with a map set and at each rename, so a page relabels what is on screen. With
``--record``, the whole map is appended to the stream's recording as a ``names`` line at each
rename, and read back with it (`record_lines.parse_names`): a restarted server keeps it.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Awaitable, Mapping
from http import HTTPStatus
from urllib.parse import parse_qsl, urlsplit

from websockets.asyncio.server import ServerConnection
from websockets.http11 import Request, Response

from streamcap.core.captions import Caption
from streamcap.core.speaker_names import NamesError, merge_names, parse_request, shown_as

from . import access, routes
from .accept import peer_address
from .client_text import check_strings, name_rule
from .close import ProtocolError
from .config import ServerConfig
from .delivery import Delivery, Sendable
from .http_body import MAX_BODY_BYTES, BodyRequest
from .hub import Hub
from .refusal import Refusals
from .request import check_token, extract_token

log = logging.getLogger("streamcap.server")

NAMES_RE = re.compile(r"/streams/([A-Za-z0-9_-][A-Za-z0-9_.-]{0,63})/names")
_JSON = "application/json; charset=utf-8"


class RenamedCaption:
    """A caption as a viewer is sent it under a rename: its wire JSON with ``speaker`` the
    name shown and ``label`` the label it was given (a `delivery.Sendable`)."""

    __slots__ = ("line", "seq")

    def __init__(self, seq: int, line: str) -> None:
        self.seq = seq
        self.line = line

    def to_json(self) -> str:
        return self.line


def renamed(item: Sendable, names: Mapping[str, str]) -> Sendable:
    """``item`` as a viewer is sent it with ``names`` applied (itself when its speaker is not
    renamed). A recorded line is parsed only when the map is not empty."""
    if not names:
        return item
    if isinstance(item, Caption) and shown_as(item.speaker, names) == item.speaker:
        return item
    # a recorded line was checked when it was indexed (`record_lines`): its speaker is text
    d = item.to_dict() if isinstance(item, Caption) else json.loads(item.to_json())
    label = str(d.get("speaker", ""))
    if shown_as(label, names) == label:
        return item
    d["speaker"], d["label"] = shown_as(label, names), label
    return RenamedCaption(item.seq, json.dumps(d, ensure_ascii=False, separators=(",", ":")))


def names_json(stream: str, names: Mapping[str, str]) -> str:
    """The ``names`` message: the stream's whole map (no ``seq``: not a caption, not in the
    log, never replayed as an event)."""
    return json.dumps({"type": "names", "stream": stream, "names": dict(names)}, ensure_ascii=False)


def _answer(status: HTTPStatus, stream: str, names: Mapping[str, str]) -> Response:
    body = json.dumps({"stream": stream, "names": dict(names)}, ensure_ascii=False)
    return routes.response(status, body + "\n", _JSON)


def write_refusal(
    cfg: ServerConfig,
    request: Request,
    peer: str,
    token: str | None,
    doing: str,
) -> str | None:
    """Why this client may not change what a stream's captions say (``doing``: "renaming",
    "enrolling a voice", `voices.py`), None when it may: the module docstring's rule."""
    hosts = request.headers.get_all("Host")
    if not access.origin_allowed(request.headers.get_all("Origin"), hosts, cfg.allowed_origins):
        return "origin not allowed"
    if cfg.publish_token is not None:
        if check_token(cfg.publish_token, token):
            return None
        return f"{'missing' if token is None else 'wrong'} publish token: {doing} needs it"
    if access.is_loopback(peer):
        return None
    return f"{doing} on a server without --publish-token is for this machine only"


def refuse_write(
    cfg: ServerConfig,
    refusals: Refusals,
    request: Request,
    connection: ServerConnection,
    token: str | None,
    doing: str,
    counted: str,
    limit: int,
    too_big: str,
) -> Response | None:
    """The answer to a POST that may not go on, None when it may: 403 for a client that may not
    write (`write_refusal` of ``doing``; counted as an auth refusal, ``counted``), else 413 for
    a body over ``limit`` bytes (``too_big`` says what one takes). Renames and voices both."""
    why = write_refusal(cfg, request, peer_address(connection), token, doing)
    if why is not None:
        refusals.refused("auth", counted)
        return routes.text(HTTPStatus.FORBIDDEN, why)
    size = request.body_bytes if isinstance(request, BodyRequest) else 0
    if size > limit:
        return routes.text(
            HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"the body is {size} bytes; {too_big}"
        )
    return None


def _constant(token: str) -> float:
    raise ValueError(f"{token} is not JSON")


class Renames:
    """Answers `/streams/ID/names` (see the module docstring)."""

    def __init__(
        self, config: ServerConfig, hub: Hub, delivery: Delivery, refusals: Refusals
    ) -> None:
        self.config = config
        self.hub = hub
        self.delivery = delivery
        self.refusals = refusals

    def response(
        self, stream: str, request: Request, connection: ServerConnection
    ) -> Response | Awaitable[Response]:
        cfg = self.config
        params = dict(parse_qsl(urlsplit(request.path).query))
        token = extract_token(params, request.headers.get)
        if request.method == "GET":
            if not check_token(cfg.view_token, token):
                return routes.text(HTTPStatus.UNAUTHORIZED, "missing or wrong view token")
            return self._get(stream)
        if request.method != "POST":
            return routes.response(
                HTTPStatus.METHOD_NOT_ALLOWED,
                "use GET to read the names, POST to rename\n",
                extra=(("Allow", "GET, POST"),),
            )
        refused = refuse_write(
            cfg, self.refusals, request, connection, token, "renaming", f"rename {stream}",
            MAX_BODY_BYTES, f"a rename takes at most {MAX_BODY_BYTES}",
        )  # fmt: skip
        if refused is not None:
            return refused
        try:
            changes = self._changes(request.body if isinstance(request, BodyRequest) else b"")
        except (NamesError, ProtocolError) as e:
            reason = e.reason if isinstance(e, ProtocolError) else str(e)
            return routes.text(HTTPStatus.BAD_REQUEST, reason)
        return self._post(stream, changes)

    @staticmethod
    def _changes(body: bytes) -> dict[str, str]:
        """The request's renames, checked (`NamesError` says what is wrong)."""
        if not body.strip():
            raise NamesError('send a JSON object of label -> name, e.g. {"Speaker 2": "Mary"}')
        try:
            obj = json.loads(body, parse_constant=_constant)
        except (ValueError, RecursionError) as e:  # incl. UnicodeDecodeError
            raise NamesError(f"the body is not JSON: {e}") from None
        check_strings(obj, "the body")  # a lone surrogate: ProtocolError, its reason in one line
        return parse_request(obj, name_rule)

    async def _get(self, stream: str) -> Response:
        entry = await self.hub.open(stream)
        if entry is None or not entry.started:
            return routes.text(HTTPStatus.NOT_FOUND, f"unknown stream {stream!r}")
        return _answer(HTTPStatus.OK, stream, entry.names)

    async def _post(self, stream: str, changes: dict[str, str]) -> Response:
        entry = await self.hub.open(stream)  # a recorded stream is read back, its map with it
        if entry is None or not entry.started:
            return routes.text(HTTPStatus.NOT_FOUND, f"unknown stream {stream!r}")
        entry = self.hub.entry(stream, entry)
        try:
            names = merge_names(entry.names, changes)
        except NamesError as e:
            return routes.text(HTTPStatus.BAD_REQUEST, str(e))
        if names != entry.names:
            entry.rename(names)
            if self.delivery.recording is not None:
                self.delivery.recording.record_names(stream, names, time.time())
            log.info("stream %s: speakers renamed: %s", stream, names or "none")
        return _answer(HTTPStatus.OK, stream, names)
