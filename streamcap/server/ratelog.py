"""Log lines that a client can trigger, rate-limited per kind, so nobody can fill the log.

A refused connection, a bad request or an exhausted file-descriptor table can happen thousands
of times a second; the operator needs to know that it happens and why, not every time. Each
kind (e.g. "refused:auth") gets `burst` lines per `interval_s`; the rest are counted, and the
next line of that kind says how many were left out. The clock is passed in (tests need none).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable


class RateLimitedLog:
    """`log(kind, level, msg, *args)`: at most `burst` lines of one kind per `interval_s`."""

    def __init__(
        self,
        logger: logging.Logger,
        *,
        interval_s: float = 10.0,
        burst: int = 5,
        clock: Callable[[], float] = time.monotonic,
        max_kinds: int = 256,
    ) -> None:
        self.logger = logger
        self.interval_s = interval_s
        self.burst = burst
        self.clock = clock
        self.max_kinds = max_kinds
        #: kind -> [window start, lines in window, suppressed since the last line]
        self._kinds: dict[str, list[float]] = {}

    def log(self, kind: str, level: int, msg: str, *args: object, exc_info: bool = False) -> bool:
        """Log unless this kind is over its budget; True when a line was written."""
        now = self.clock()
        state = self._kinds.get(kind)
        if state is None:
            if len(self._kinds) >= self.max_kinds:
                self._kinds.clear()  # kinds come from a fixed set; this only bounds memory
            state = self._kinds[kind] = [now, 0.0, 0.0]
        if now - state[0] >= self.interval_s:
            state[0], state[1] = now, 0.0
        if state[1] >= self.burst:
            state[2] += 1
            return False
        state[1] += 1
        suppressed = int(state[2])
        state[2] = 0.0
        if suppressed:
            msg += f" ({suppressed} more like this not logged)"
        self.logger.log(level, msg, *args, exc_info=exc_info)
        return True

    def info(self, kind: str, msg: str, *args: object) -> bool:
        return self.log(kind, logging.INFO, msg, *args)

    def warning(self, kind: str, msg: str, *args: object) -> bool:
        return self.log(kind, logging.WARNING, msg, *args)

    def error(self, kind: str, msg: str, *args: object, exc_info: bool = False) -> bool:
        return self.log(kind, logging.ERROR, msg, *args, exc_info=exc_info)
