"""Who may hold a socket: the connection budget, with a small share for strangers.

Every TCP connection counts against `limit` (file descriptors are finite). Until a connection
proves it belongs here — a viewer whose token checked out, a publisher whose start message
claimed its place — it is *pending*, and pending connections have budgets of their own: at
most `per_address` from one client address and at most half of `limit` in all. So a pile of
idle sockets (or start-less publishers, or a slow-reading downloader's friends) from one
address cannot lock token holders out, and strangers from many addresses together cannot fill
the server. New connections from one address are also paced (`accept_rate` per second after
a burst of `accept_burst`): a client looping requests that are refused anyway (a download over
its budget, a wrong token) is dropped at the accept, before any parsing. Pure bookkeeping:
`accept.py`'s connection class asks and acts on the answer.
"""

from __future__ import annotations

from collections import Counter

from .bucket import BucketsByKey


class ConnectionBudget:
    """Counts of open connections: all of them, and the pending ones per client address."""

    def __init__(
        self,
        limit: int,
        per_address: int,
        accept_rate: float | None = None,
        accept_burst: float = 200.0,
    ) -> None:
        if limit < 2 or per_address < 1:
            raise ValueError("a connection budget needs limit >= 2 and per_address >= 1")
        self.limit = limit
        self.per_address = per_address
        self.accept_rate = accept_rate
        self.open = 0
        self._pending: Counter[str] = Counter()
        self._paces = BucketsByKey(accept_rate, accept_burst) if accept_rate is not None else None

    @property
    def pending(self) -> int:
        return sum(self._pending.values())

    @property
    def pending_limit(self) -> int:
        """Pending connections in all: half the budget, so the other half is always there for
        connections that have proved themselves."""
        return max(1, self.limit // 2)

    def pending_from(self, address: str) -> int:
        return self._pending[address]

    def refusal(self, address: str, now: float = 0.0) -> str | None:
        """Why a new connection from `address` is dropped at accept, or None (a connection
        that is not refused is counted against the address's pace)."""
        if self._paces is not None and not self._paces.of(address).take(1.0, now):
            return f"more than {self.accept_rate:g} new connections a second from {address}"
        if self.open >= self.limit:
            return f"{self.open} open (the limit is {self.limit})"
        if self._pending[address] >= self.per_address:
            return (
                f"{self._pending[address]} connections from {address} not yet authenticated "
                f"(the limit per address is {self.per_address})"
            )
        if self.pending >= self.pending_limit:
            n, limit = self.pending, self.pending_limit
            return f"{n} connections not yet authenticated (the limit is {limit})"
        return None

    def accept(self, address: str) -> None:
        """A new connection from `address`, pending (call only when `refusal` said None)."""
        self.open += 1
        self._pending[address] += 1

    def authenticate(self, address: str) -> None:
        """The connection from `address` proved itself: it leaves the pending budget."""
        self._drop_pending(address)

    def close(self, address: str, pending: bool) -> None:
        """A connection from `address` ended (`pending`: it never authenticated)."""
        self.open -= 1
        if pending:
            self._drop_pending(address)

    def _drop_pending(self, address: str) -> None:
        self._pending[address] -= 1
        if self._pending[address] <= 0:
            del self._pending[address]
