"""When a publisher may send audio, and when it tries again (`streamcap publish`). Pure: the
caller gives the time.

The server's flood guard (`server.protocol.IngestState`) counts a connection's audio from its
first frame and closes it (1008) once that audio runs more than ``--burst`` seconds (default
5) ahead of the wall clock. A publisher that comes back after an outage with a backlog may
therefore send `ahead_s` at once and then no faster than real time: `SendPacer` says how much
may go now, a margin under the server's limit (the server's clock starts when the first frame
arrives, a little after it left). A backlog longer than that stays behind live by the rest,
which the status line shows; `flooded` halves the margin's base after a refusal (a server run
with a smaller ``--burst``).
"""

from __future__ import annotations

from typing import Literal

__all__ = ["Backoff", "CloseVerdict", "SendPacer", "after_close"]


class SendPacer:
    """How much audio one connection may send: at most `ahead_s` seconds ahead of the wall
    clock since its first frame (`begin`)."""

    def __init__(self, burst_s: float = 5.0, margin_s: float = 1.0) -> None:
        if burst_s <= 0:
            raise ValueError(f"burst_s must be positive, got {burst_s}")
        self.burst_s = burst_s
        self.margin_s = margin_s
        self._t0: float | None = None
        self.sent_s = 0.0

    @property
    def ahead_s(self) -> float:
        """How far ahead of real time this publisher goes: the server's burst less the margin,
        at least a tenth of it."""
        return max(self.burst_s - self.margin_s, self.burst_s / 10)

    def begin(self, now: float) -> None:
        """A new connection's first frame goes at `now`."""
        self._t0 = now
        self.sent_s = 0.0

    def room(self, now: float) -> float:
        """Seconds of audio that may be sent at `now` (before `begin`: `ahead_s`)."""
        elapsed = 0.0 if self._t0 is None else max(0.0, now - self._t0)
        return max(0.0, self.ahead_s + elapsed - self.sent_s)

    def wait(self, now: float, seconds: float) -> float:
        """How long until `seconds` of audio may be sent (0: now)."""
        return max(0.0, min(seconds, self.ahead_s) - self.room(now))

    def sent(self, seconds: float) -> None:
        self.sent_s += seconds

    def flooded(self) -> None:
        """The server refused the pace (a flood): go half as far ahead from now on."""
        self.burst_s /= 2


class Backoff:
    """Waits between attempts to reconnect: `first`, doubling up to `most`; `reset` after a
    connection that worked."""

    def __init__(self, first: float = 0.5, most: float = 10.0) -> None:
        if not 0 < first <= most:
            raise ValueError(f"need 0 < first <= most, got {first}, {most}")
        self.first = first
        self.most = most
        self._next = first

    def next(self) -> float:
        delay = self._next
        self._next = min(self.most, self._next * 2)
        return delay

    def reset(self) -> None:
        self._next = self.first


#: What a publisher does after the server closed its connection: it is "done" (every final is
#: out after its stop), it "retry"s (a restart, a drop, a full server), it retries slower after
#: a "flood" refusal, or it stops: "fatal" (a wrong token, a bad start message or stream id:
#: trying again cannot help), "replaced" (another connection took the stream over).
CloseVerdict = Literal["done", "retry", "flood", "fatal", "replaced"]


def after_close(code: int | None, reason: str) -> CloseVerdict:
    """The verdict on a close frame (code None: the connection dropped without one), by the
    codes and reasons of docs/protocol.md, "Errors and close codes"."""
    if code == 1000:
        return "done"
    if code == 1001 and "replaced" in reason:
        return "replaced"
    if code in (1003, 1009):  # the server read our start or frames as bad data
        return "fatal"
    if code == 1008:
        if "faster than real time" in reason or "too many messages" in reason:
            return "flood"
        if "token" in reason or "invalid stream id" in reason:
            return "fatal"
    return "retry"  # 1001 shutting down, 1006 dropped, 1011, 1013 full, 1008 busy or idle
