"""A server's publishers: every publisher connection, and the one claim rule by which one
takes its place in a room.

Its own piece because the rule waits and asks elsewhere: a publisher coming back waits for its
old session's finals, and a place is refused for shutdown, the stream limit or admission
(`full`, the server's). The table of claims itself stays pure in `rooms.py`. The server asks
`refusal_at_connect` before a session starts; the session `claim`s at its valid start, through
its port (`services.PublisherServices`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator

from .accept import authenticated, peer_address
from .close import CloseCode, ProtocolError, Refused
from .config import ServerConfig
from .ratelog import RateLimitedLog
from .refusal import REFUSE_CLOSE_TIMEOUT_S
from .rooms import RoomClaims, who
from .services import Publisher


class Publishers:
    """Iterates the sessions holding a place (from their valid start on); `sessions` holds
    every publisher connection, started or not (shutdown stops them all)."""

    def __init__(
        self,
        config: ServerConfig,
        rlog: RateLimitedLog,
        *,
        full: Callable[[str], str | None],
        closing: Callable[[], bool],
    ) -> None:
        self.config = config
        self.rlog = rlog
        self._full = full
        self._closing = closing
        #: (room, speaker name or "") -> its publisher's session, from its valid start on
        self._claims: RoomClaims[Publisher] = RoomClaims(config.max_speakers_per_room)
        #: every publisher connection, started or not (shutdown stops them all)
        self.sessions: set[Publisher] = set()

    def __iter__(self) -> Iterator[Publisher]:
        return iter(self._claims)

    def opened(self, session: Publisher) -> None:
        self.sessions.add(session)

    def closed(self, session: Publisher) -> None:
        """`session` has ended: it goes, and so does its place, if its start claimed one."""
        self.sessions.discard(session)
        self._claims.release(session.stream, session.speaker, session)

    def refusal_at_connect(
        self, stream: str, speaker: str, address: str
    ) -> tuple[ProtocolError, str] | None:
        """A refusal that is certain before the start message (a taken URL name on a server
        without a publish token, a full room, the limits), so such a client hears it at once.
        Anything that depends on the start message's name waits for `claim`."""
        if self._closing():
            return ProtocolError(CloseCode.GOING_AWAY, "server shutting down"), "shutdown"
        held = self._claims.get(stream, speaker) if speaker else None
        if held is not None and not (held.connected and self.config.publish_token is None):
            return None  # the same publisher coming back: decided at its start (`claim`)
        if not speaker and any(s.stream == stream for s in self._claims):
            return None  # the start may name it: decided at its start
        return self._refusal(stream, speaker, address)

    def _refusal(self, stream: str, speaker: str, address: str) -> tuple[ProtocolError, str] | None:
        room_err = self._claims.refusal(stream, speaker)
        if room_err is not None:
            return room_err, "busy"
        cfg = self.config
        if len(self._claims) >= cfg.max_streams:
            why = f"server is at its limit of {cfg.max_streams} streams"
            return ProtocolError(CloseCode.POLICY_VIOLATION, why), "limit"
        share = cfg.streams_per_address  # an open server: the first comer cannot take it all
        held = sum(1 for s in self._claims if peer_address(s.ws) == address)
        if share is not None and held >= share:
            why = (
                f"{address} already publishes {held} of the server's {cfg.max_streams} streams; "
                f"one address may hold {share} on a server without a publish token"
            )
            return ProtocolError(CloseCode.POLICY_VIOLATION, why), "limit"
        full = self._full(stream)
        if full:
            return ProtocolError(CloseCode.TRY_AGAIN_LATER, f"server is full: {full}"), "full"
        return None

    async def claim(self, session: Publisher, speaker: str) -> None:
        """`session` sent a valid start naming `speaker` (from its URL or its start message):
        it takes its place in the room, or `Refused` says why not.

        The one claim rule: a name is one publisher's. The same publisher coming back (its
        dropped connection still finalising, or — with a publish token — one still open) takes
        over once the old session's audio is finalised; anyone else is refused."""
        cfg = self.config
        stream = session.stream
        while (old := self._claims.get(stream, speaker)) is not None:
            if old.connected and cfg.publish_token is None:
                err = self._claims.refusal(stream, speaker)
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
        if self._closing():
            raise Refused(ProtocolError(CloseCode.GOING_AWAY, "server shutting down"), "shutdown")
        refused = self._refusal(stream, speaker, peer_address(session.ws))
        if refused is not None:
            raise Refused(*refused)
        self._claims.claim(stream, speaker, session)
        session.speaker = speaker
        authenticated(session.ws)
