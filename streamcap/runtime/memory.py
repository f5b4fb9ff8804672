"""The process's C heap: what glibc's malloc holds, and giving its free pages back.

A caption server runs for hours. Its Python objects are bounded (each stream's log keeps a
window of finals, viewers are cursors), but the model's tensors are allocated and freed by
glibc's malloc on every decode, in blocks of many sizes (a 30 s window's encoder output, a
partial's shorter one, the decoder's growing cache). glibc keeps freed blocks in its arenas for
reuse and returns memory to the system only from the top of a heap, so a long run's resident
size creeps up although nothing is leaked: the free space inside the arenas grows (measured,
issue 25: 36 -> 64 MB over 150 decodes). `heap_figures` tells that apart from a leak (bytes in
use vs free inside the heap); `HeapTrimmer` (glibc's `malloc_trim`, ~5 ms on a 300 MB heap)
hands the free pages back when the worker has nothing to do.

Only glibc has these calls; elsewhere (musl, macOS) both are no-ops and the figures are empty.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import time
from functools import cache

log = logging.getLogger(__name__)


class _Mallinfo2(ctypes.Structure):
    """glibc's `struct mallinfo2` (2.33+): every field a size_t."""

    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


@cache
def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
        libc.mallinfo2.restype = _Mallinfo2
        libc.mallinfo2.argtypes = []
        libc.malloc_trim.restype = ctypes.c_int
        libc.malloc_trim.argtypes = [ctypes.c_size_t]
    except (OSError, AttributeError):  # not glibc, or older than 2.33
        return None
    return libc


def heap_figures() -> dict[str, float]:
    """Bytes of the C heap: `in_use` (allocated), `free` (held in the arenas, reusable),
    `mmapped` (large blocks mapped on their own, returned at free). Empty without glibc."""
    libc = _libc()
    if libc is None:
        return {}
    info = libc.mallinfo2()
    return {
        "in_use": float(info.uordblks),
        "free": float(info.fordblks),
        "mmapped": float(info.hblkhd),
    }


def trim_heap() -> bool:
    """Return the free pages inside the C heap to the system (True if any were)."""
    libc = _libc()
    if libc is None:
        return False
    return bool(libc.malloc_trim(0))


class HeapTrimmer:
    """Trims the heap when the worker goes idle after work, at most every `interval_s`."""

    def __init__(self, interval_s: float = 2.0) -> None:
        self.interval_s = interval_s
        self.trims = 0
        self._due = False
        self._last = float("-inf")  # monotonic time may start near 0 (a fresh boot)

    def worked(self) -> None:
        """A job ran: the next idle moment may trim."""
        self._due = True

    def idle(self) -> None:
        """Nothing is queued: trim now if work was done since the last trim (and not too
        recently)."""
        now = time.monotonic()
        if self._due and now - self._last >= self.interval_s:
            self._due = False
            self._last = now
            trim_heap()
            self.trims += 1
