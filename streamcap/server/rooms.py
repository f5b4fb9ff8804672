"""Who publishes where: the claims of a room's publishers, and the rules they follow.

A stream is a room of publishers with distinct names (one without a name at most), up to
`max_per_room` at once. A publisher claims its (room, name) once, at its valid start message,
whether the name came in the URL or in the start: one rule for both, and a connection that has
not started holds nothing, so two people joining at once never meet over a claim neither has
made. No sockets here: the server (`publishers.py`) asks and acts on the answer.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Generic, TypeVar

from .close import CloseCode, ProtocolError

S = TypeVar("S")


def who(room: str, speaker: str) -> str:
    """How a log line or a refusal names a publisher."""
    return f"stream {room!r}" + (f" speaker {speaker!r}" if speaker else "")


class RoomClaims(Generic[S]):
    """(room, speaker name or "") -> the session that publishes it."""

    def __init__(self, max_per_room: int) -> None:
        self.max_per_room = max_per_room
        self._claims: dict[tuple[str, str], S] = {}

    def __len__(self) -> int:
        return len(self._claims)

    def __iter__(self) -> Iterator[S]:
        return iter(list(self._claims.values()))

    def get(self, room: str, speaker: str) -> S | None:
        return self._claims.get((room, speaker))

    def refusal(self, room: str, speaker: str) -> ProtocolError | None:
        """Why `speaker` may not join `room` now, or None."""
        if (room, speaker) in self._claims:
            if speaker:
                why = f"speaker {speaker!r} is already publishing in stream {room!r}"
            else:  # as before rooms: a stream's one unnamed publisher
                why = f"stream {room!r} already has a publisher"
            return ProtocolError(CloseCode.POLICY_VIOLATION, why)
        if sum(1 for r, _ in self._claims if r == room) >= self.max_per_room:
            return ProtocolError(
                CloseCode.POLICY_VIOLATION,
                f"stream {room!r} has its limit of {self.max_per_room} publishers",
            )
        return None

    def claim(self, room: str, speaker: str, session: S) -> None:
        self._claims[(room, speaker)] = session

    def release(self, room: str, speaker: str, session: S) -> None:
        """Drop the claim if `session` still holds it (a takeover may have replaced it)."""
        if self._claims.get((room, speaker)) is session:
            del self._claims[(room, speaker)]
