"""A token bucket: `burst` deep, refilled at `rate` per second. Pure (the caller gives `now`).

One rule for every budget of the server that is spent in amounts over time: a publisher's
messages (`protocol.IngestState`), and the bytes the server reads back or sends for a client
(`ByteBudget`: subtitle downloads and replays from a recording, per client address and in
all), so a looping downloader or viewer cannot take the CPU from the captions.
"""

from __future__ import annotations


class TokenBucket:
    def __init__(self, rate: float, burst: float) -> None:
        if rate <= 0 or burst <= 0:
            raise ValueError("a token bucket needs a positive rate and burst")
        self.rate = rate
        self.burst = burst
        self.tokens = burst
        self._t: float | None = None

    def _refill(self, now: float) -> None:
        if self._t is not None:
            self.tokens = min(self.burst, self.tokens + max(0.0, now - self._t) * self.rate)
        self._t = now

    def take(self, amount: float, now: float) -> bool:
        """Spend `amount` if the bucket holds it (True), else spend nothing (False)."""
        self._refill(now)
        if self.tokens < amount:
            return False
        self.tokens -= amount
        return True

    def spend(self, amount: float, now: float) -> None:
        """Spend `amount` (at most a full bucket), down to empty: for a caller that has just
        seen `wait_s` say 0."""
        self._refill(now)
        self.tokens = max(0.0, self.tokens - min(amount, self.burst))

    def wait_s(self, amount: float, now: float) -> float:
        """Seconds until `amount` could be taken (0 if now; an amount over `burst` waits for a
        full bucket)."""
        self._refill(now)
        return max(0.0, (min(amount, self.burst) - self.tokens) / self.rate)

    def full(self, now: float) -> bool:
        self._refill(now)
        return self.tokens >= self.burst


class BucketsByKey:
    """A token bucket per key (a client address), made full on first use; the `most` keys
    used most recently are remembered, the others forgotten (a forgotten key starts full)."""

    def __init__(self, rate: float, burst: float, most: int = 4096) -> None:
        self.rate, self.burst, self.most = rate, burst, most
        self._buckets: dict[str, TokenBucket] = {}

    def __len__(self) -> int:
        return len(self._buckets)

    def of(self, key: str) -> TokenBucket:
        bucket = self._buckets.pop(key, None) or TokenBucket(self.rate, self.burst)
        self._buckets[key] = bucket  # most recent last: the oldest go first
        while len(self._buckets) > self.most:
            del self._buckets[next(iter(self._buckets))]
        return bucket


class ByteBudget:
    """Bytes the server reads back or sends for one client address (`burst` at once, refilled
    at `rate` per second) and for all addresses together (`share` times that). Work is
    checked against it before it is done (`wait_s`), so a request it refuses costs nothing."""

    def __init__(self, rate: float, burst: float, share: float = 4.0) -> None:
        self._mine = BucketsByKey(rate, burst)
        self._all = TokenBucket(share * rate, share * burst)

    def wait_s(self, address: str, size: float, now: float) -> float:
        """0 if `size` bytes fit `address`'s budget and everyone's now, else the seconds until
        they would (a size over the burst waits for a full bucket)."""
        return max(self._mine.of(address).wait_s(size, now), self._all.wait_s(size, now))

    def spend(self, address: str, size: float, now: float) -> None:
        self._mine.of(address).spend(size, now)
        self._all.spend(size, now)
