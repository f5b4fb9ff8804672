"""Who publishes where: the claims of a room's publishers, and the rules they follow.

A stream is a room of publishers with distinct names (one without a name at most), up to
`max_per_room` at once. A publisher claims its (room, name) once, at its valid start message,
whether the name came in the URL or in the start: one rule for both, and a connection that has
not started holds nothing, so two people joining at once never meet over a claim neither has
made. No sockets here: the server (`publishers.py`) asks and acts on the answer.

A room's captions pass its cross-talk check (`RoomCrossTalk`, the rule in `core.crosstalk`)
before they enter the room's log: a sentence one microphone heard from another participant is
left out, so each is captioned once, under its speaker's name. The check is told where each
microphone heard no speech (`Publication.quiet`, its segmenter's word, on the room's clock): a
caption no other microphone can have heard is decided at once, not held. No timers here either:
the server (`delivery.py`) calls `expire` when `due` says.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator
from dataclasses import replace
from typing import Generic, TypeVar

from streamcap.core.captions import CaptionEvent
from streamcap.core.crosstalk import CrossTalk, CrossTalkConfig, Heard, Released

from .close import CloseCode, ProtocolError
from .hub import Publication, StreamEntry

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


#: A caption of a room's publisher, as the worker gave it.
Said = tuple[CaptionEvent, Publication]


class RoomCrossTalk:
    """One room's captions through the cross-talk check: `offer` each as it comes (from any of
    the room's publishers), `expire` at `due`, `flush` when the room ends; each returns what
    goes into the room's log now, in order. A caption that waited has the wait added to its
    `latency_ms` (what the viewers, the overlay's hold and the latency metric see); a copy is
    left out, or sent empty when a partial of it is on screen (it clears it)."""

    def __init__(self, entry: StreamEntry, config: CrossTalkConfig | None = None) -> None:
        self.entry = entry
        self.check: CrossTalk[Said] = CrossTalk(config)
        #: copies of another participant's sentence left out so far (finals)
        self.copies = 0
        #: finals that waited, and the longest wait (s)
        self.held = 0
        self.longest_s = 0.0

    def offer(self, cap: CaptionEvent, pub: Publication, now: float) -> list[Said]:
        shift = pub.time_offset
        heard = Heard(pub, cap.type, cap.segment, cap.text, cap.start + shift, cap.end + shift,
                      cap.level_db, cap.latency_ms / 1000.0)  # fmt: skip
        pubs = self.entry.publications
        return self._out(self.check.offer(heard, (cap, pub), now, pubs, self._quiet()))

    def due(self) -> float | None:
        return self.check.due()

    def expire(self, now: float) -> list[Said]:
        return self._out(self.check.expire(now, self.entry.publications, self._quiet()))

    def flush(self, now: float) -> list[Said]:
        return self._out(self.check.flush(now))

    def drain(self) -> list[Said]:
        """What waits, as it came (a decision failed: a caption is never lost to the check)."""
        return self.check.drain()

    def _quiet(self) -> dict[Hashable, tuple[float, float]]:
        """Where each publisher's microphone heard no speech, on the room's clock, as its
        segmenter says now (`Publication.quiet`; one whose pipeline does not say is left out).
        A caption no other publisher can have been speaking over is decided at once."""
        out: dict[Hashable, tuple[float, float]] = {}
        for p in self.entry.publications:
            if p.quiet is not None:
                a, b = p.quiet()
                out[p] = (a + p.time_offset, b + p.time_offset)
        return out

    def _out(self, released: list[Released[Said]]) -> list[Said]:
        out: list[Said] = []
        for r in released:
            cap, pub = r.payload
            if r.verdict != "show":
                if r.heard.type == "final" and r.heard.text.strip():
                    self.copies += 1
                if r.verdict == "drop":
                    continue
                cap = replace(cap, text="", committed_chars=0, words=())
            if r.held_s > 0:
                cap = replace(cap, latency_ms=cap.latency_ms + 1000.0 * r.held_s)
                if cap.type == "final" and r.verdict == "show":
                    self.held += 1
                    self.longest_s = max(self.longest_s, r.held_s)
            out.append((cap, pub))
        return out
