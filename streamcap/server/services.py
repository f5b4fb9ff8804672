"""What a publisher or a viewer connection may ask of its server: two narrow ports.

A session (`ingest.IngestSession`, `viewers.serve_viewer`) is handed one of these, never the
`CaptionServer`: what a connection can reach is the list below — claim its place, refuse a
client, hand its captions over, record, replay — and the server's other parts (the request
gate, the accept budget, admission, shutdown) can change without a session noticing. The
server builds both from its parts (`app.CaptionServer`); nothing here imports it, and an
import-linter contract keeps it so.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from websockets.asyncio.server import ServerConnection

from streamcap.core.captions import CaptionEvent
from streamcap.core.load_shed import LoadShedder

from .close import ProtocolError
from .config import ServerConfig, StreamFactory
from .delivery import Sendable
from .hub import Hub, Publication, StreamEntry
from .metrics import ServerMetrics
from .ratelog import RateLimitedLog


class Publisher(Protocol):
    """A publisher connection as the claim rule sees it (`ingest.IngestSession` is one)."""

    #: its name in its room, set by the claim
    speaker: str

    @property
    def stream(self) -> str: ...

    @property
    def ws(self) -> ServerConnection: ...

    @property
    def connected(self) -> bool: ...

    @property
    def done(self) -> asyncio.Event: ...

    def request_stop(self, code: int, reason: str) -> None: ...


class Refuse(Protocol):
    """Tell a client why, count it, close (`refusal.Refusals.refuse`)."""

    def __call__(
        self, ws: ServerConnection, err: ProtocolError, label: str, stream: str | None = None
    ) -> Awaitable[None]: ...


class Claim(Protocol):
    """A publisher's valid start takes its place in the room as `speaker`, or raises `Refused`
    (`publishers.Publishers.claim`)."""

    def __call__(self, session: Publisher, speaker: str) -> Awaitable[None]: ...


@dataclass(frozen=True)
class PublisherServices:
    """What a publisher connection (`ingest.IngestSession`) may ask of its server."""

    config: ServerConfig
    hub: Hub
    metrics: ServerMetrics
    rlog: RateLimitedLog
    refuse: Refuse
    claim: Claim
    #: makes the live stream that decodes a publisher's audio
    stream_factory: StreamFactory
    #: where a publication's captions go, from any thread (`delivery.Delivery`)
    caption_callback: Callable[[StreamEntry, Publication], Callable[[CaptionEvent], None]]
    #: where a live stream says its partials' pace changed, from any thread (`delivery`)
    pace_callback: Callable[[StreamEntry], Callable[[LoadShedder], None]]
    #: a publisher came or went: the worker's meter counts the live rooms
    streams_changed: Callable[[], None]
    #: a publisher of the room has gone: what its captions wait for is decided now, so its
    #: "stopped" close is true (every final out)
    publisher_left: Callable[[str], None]
    #: the room's last publisher has gone: its recording closes
    stream_closed: Callable[[str], None]


@dataclass(frozen=True)
class ViewerServices:
    """What a viewer connection (`viewers.serve_viewer`) may ask of its server."""

    config: ServerConfig
    hub: Hub
    metrics: ServerMetrics
    rlog: RateLimitedLog
    refuse: Refuse
    #: what a viewer at a cursor, from a client address, is sent next, recorded finals
    #: included a chunk at a time (`delivery.Delivery.replay`)
    replay: Callable[[StreamEntry, int, str], Awaitable[tuple[list[Sendable], int | None]]]
    #: one event per open viewer, set when it has gone: shutdown waits for them
    viewer_done: set[asyncio.Event]
