"""Connections counted from the TCP accept (`budget.ConnectionBudget`), before websockets
parses a byte of them.

Its own piece because it works below the handshake, on websockets' connection class itself:
over the budget — all connections, or those not yet authenticated from one address — a new one
is dropped before its handshake, and one that has not sent its whole request within
`handshake_timeout_s` is dropped too. So idle sockets hold neither stream slots nor file
descriptors, and strangers cannot lock token holders out. A connection leaves the budget of
strangers when it proves itself (`authenticated`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from websockets.asyncio.server import ServerConnection
from websockets.frames import Frame, Opcode
from websockets.protocol import Event

from .budget import ConnectionBudget
from .close import ProtocolError
from .http_body import BodyRequest, read_bodies
from .refusal import Refusals

#: A connection dropped at the accept is held unread this long first (at most TARPIT_MAX at once).
TARPIT_S = 1.0
TARPIT_MAX = 64


def authenticated(ws: ServerConnection) -> None:
    """`ws` proved itself (token checked, or a publisher's place claimed): it leaves the
    budget of connections not yet authenticated (`budget.ConnectionBudget`)."""
    done = getattr(ws, "authenticated", None)
    if done is not None:
        done()


def peer_address(ws: ServerConnection) -> str:
    """The client's address as the accept counted it ("?" when the transport has none)."""
    address = getattr(ws, "_address", "")
    if address:
        return str(address)
    peer = ws.remote_address
    return str(peer[0]) if isinstance(peer, tuple) and peer else "?"


#: refusals of control-frame floods under way (a task must be held until it is done)
_refusing: set[asyncio.Task[None]] = set()


def count_control_frames(
    ws: ServerConnection,
    count: Callable[[float], None],
    refuse: Callable[[ProtocolError], Awaitable[None]],
) -> None:
    """`count(now)` every ping or pong frame `ws` receives; when it raises (over the message
    rate), `refuse` the client, once. websockets answers pings below the application (no
    message reaches `recv`), so a rate guard that counts only what `recv` returns never sees a
    ping flood (red-team round 4: 20 000 pings in 0.3 s, no close); this is where they arrive."""
    if not hasattr(ws, "on_control"):
        return

    def counted() -> None:
        try:
            count(time.monotonic())
        except ProtocolError as e:
            ws.on_control = None  # refused once; reading is paused by the refusal
            task = asyncio.ensure_future(refuse(e))
            _refusing.add(task)
            task.add_done_callback(_refusing.discard)

    ws.on_control = counted


def counted_connection(
    budget: ConnectionBudget,
    refusals: Refusals,
    handshake_timeout_s: float,
    keeps_sample: Callable[[BodyRequest, str], bool] | None = None,
) -> type[ServerConnection]:
    """A `ServerConnection` class counted against `budget` from the accept on (see the module
    docstring); every connection it drops is a refusal (`refusals`). ``keeps_sample(request,
    address)``: whether a client may post a voice sample's body (`http_body`)."""
    #: connections refused at the accept that are held a moment before the drop
    tarpitted = 0

    class CountedConnection(ServerConnection):
        _counted = False
        _dropped = False
        _pending = False
        _address = ""
        _deadline: asyncio.TimerHandle | None = None
        _tarpit: asyncio.Transport | None = None
        #: called for each ping or pong received (`count_control_frames`)
        on_control: Callable[[], None] | None = None

        def process_event(self, event: Event) -> None:
            if (
                self.on_control is not None
                and isinstance(event, Frame)
                and event.opcode in (Opcode.PING, Opcode.PONG)
            ):
                self.on_control()
            super().process_event(event)

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            nonlocal tarpitted
            peer = transport.get_extra_info("peername")
            address = str(peer[0]) if isinstance(peer, tuple) and peer else "?"
            why = budget.refusal(address, time.monotonic())
            if why is not None:  # dropped before websockets sets anything up: cheap
                self._dropped = True
                refusals.refused("connections", why)
                if tarpitted < TARPIT_MAX and isinstance(transport, asyncio.Transport):
                    # held unread a moment before the drop: a client that loops connections
                    # then waits, instead of costing an accept every few hundred microseconds
                    tarpitted += 1
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
            keeps = None if keeps_sample is None else lambda r, a=address: keeps_sample(r, a)
            read_bodies(self.protocol, keeps)  # a POST's body (`http_body`): renames, voices
            budget.accept(address)
            self._counted = self._pending = True
            self._address = address
            self._deadline = self.loop.call_later(handshake_timeout_s, self._handshake_expired)

        def _untarpit(self) -> None:
            nonlocal tarpitted
            transport, self._tarpit = self._tarpit, None
            if transport is not None:
                tarpitted -= 1
                transport.abort()

        def _handshake_expired(self) -> None:
            if self.request is None:  # no complete request in time: a slow or idle socket
                refusals.refused("handshake_timeout", self._address)
                self.transport.abort()

        def authenticated(self) -> None:
            if self._pending:
                self._pending = False
                budget.authenticate(self._address)

        def connection_lost(self, exc: Exception | None) -> None:
            nonlocal tarpitted
            if self._dropped:  # never set up: nothing of websockets' to tear down
                if self._tarpit is not None:
                    self._tarpit = None
                    tarpitted -= 1
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
