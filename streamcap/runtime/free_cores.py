"""How many of this process's cores other programs leave it: the thread count to run on.

Measuring which thread count is cheaper by trying both (`encoder_threads.AdaptiveThreads`) has
a price on a busy machine: each probe of the slower count is a slow call, and there it is very
slow (the encoder on 2 threads beside one busy process: 0.95 ms per 100 positions against
0.23 on 1, a 30 s window 1.4 s instead of 0.35 s; issue 38 on the Intel AMX dev machine), and
a probe on a final is a late final. The kernel already counts what the other programs use:
`/proc/stat` gives each CPU's busy time, `os.times` this process's own, so the cores the others
keep busy are their difference, read at every call for nothing. `FreeCores` runs on as many
threads as cores are left free (at least one), with a margin either way so that a load near a
whole core does not flip the count call by call.

Exactness is the strategies' concern, not this one's: the encoder runs on another count only
where its bits are the same on every count (`Engine.adapt_threads`), and the decoder follows
with the same tokens (`runtime.decoder_threads`). Where `/proc/stat` cannot be read (not
Linux), `available` says so and the engine measures instead.

The default (`Engine.adapt_threads(free_cores=True)`) since the decoder follows it too: beside
one busy process (lf3's first 150 s, simulated clock, wall timer) the measured count kept
probing two threads (58 of 126 encoder calls; final p95 2.1-2.2 s) where this count stayed on
one (final p95 1.39 s; issue 38's note). Before that, with the decoder on all threads, the
measured count had been the better of the two on the real clock.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

__all__ = ["FreeCores", "OtherLoad"]

_STAT = Path("/proc/stat")
#: /proc/stat's columns after the CPU's name: user nice system idle iowait irq softirq steal
_IDLE = (3, 4)  # idle, iowait
_BUSY_COLUMNS = 8  # through steal (time the hypervisor gave another machine: not ours either)


def _cpu_times(cpus: frozenset[int], text: str) -> tuple[float, float] | None:
    """(busy, total) seconds of ``cpus`` from /proc/stat's text; None if none of them is there."""
    tick = os.sysconf("SC_CLK_TCK")
    busy = total = 0
    found = False
    for line in text.splitlines():
        name, _, rest = line.partition(" ")
        if not name.startswith("cpu") or name == "cpu" or not name[3:].isdigit():
            continue
        if int(name[3:]) not in cpus:
            continue
        cols = [int(v) for v in rest.split()[:_BUSY_COLUMNS]]
        idle = sum(cols[i] for i in _IDLE)
        total += sum(cols)
        busy += sum(cols) - idle
        found = True
    return (busy / tick, total / tick) if found else None


class OtherLoad:
    """Cores' worth of CPU the *other* programs used on this process's CPUs, smoothed over
    about ``window_s`` seconds: /proc/stat's busy time of those CPUs less this process's."""

    def __init__(
        self,
        window_s: float = 2.0,
        read: Callable[[], str] | None = None,
        own: Callable[[], float] | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.window_s = window_s
        self._read = read or _STAT.read_text
        self._own = own or (lambda: sum(os.times()[:2]))
        self._clock = clock or time.monotonic
        self.cpus = (
            frozenset(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else frozenset()
        )
        self._last: tuple[float, float, float] | None = None  # (wall, busy, own)
        self.cores: float | None = None  # the smoothed figure; None before two readings

    @property
    def available(self) -> bool:
        """Whether the kernel's counts can be read here."""
        try:
            return bool(self.cpus) and _cpu_times(self.cpus, self._read()) is not None
        except OSError:
            return False

    def sample(self) -> float | None:
        """Read the counts now; the others' cores, smoothed (None until there are two readings
        some time apart)."""
        times = _cpu_times(self.cpus, self._read())
        if times is None:
            return self.cores
        now, busy, own = self._clock(), times[0], self._own()
        last = self._last
        if last is None:
            self._last = (now, busy, own)
            return self.cores
        wall = now - last[0]
        if wall < 0.05:  # too short to say anything: the next call will
            return self.cores
        others = max(0.0, ((busy - last[1]) - (own - last[2])) / wall)
        share = min(1.0, wall / self.window_s)
        self.cores = others if self.cores is None else (1 - share) * self.cores + share * others
        self._last = (now, busy, own)
        return self.cores


class FreeCores:
    """Runs each call on as many threads as the other programs leave cores free (of
    ``threads``; at least 1), read at every call (`OtherLoad`). A count is given up when the
    others' load on top of the cores it leaves passes ``drop`` of a core, and taken again only
    under ``regain``: a load near the line does not flip the count call by call."""

    name = "free-cores"

    def __init__(
        self,
        threads: int,
        load: OtherLoad | None = None,
        drop: float = 0.35,
        regain: float = 0.15,
    ) -> None:
        if threads < 2:
            raise ValueError("free cores need two or more threads to choose from")
        if not 0.0 <= regain <= drop < 1.0:
            raise ValueError("free cores need 0 <= regain <= drop < 1")
        self.threads = threads
        self.load = load or OtherLoad()
        self.drop, self.regain = drop, regain
        self.current = threads
        self.calls: dict[int, int] = {}
        self.changes = 0
        self._lock = threading.Lock()

    def _count(self, others: float, tolerance: float) -> int:
        cores = len(self.load.cpus) or self.threads
        return max(1, min(self.threads, cores - math.ceil(others - tolerance)))

    def preferred(self) -> int:
        """The count for the next call, from the others' load now."""
        with self._lock:
            others = self.load.sample()
            if others is not None:
                n = self.current
                if self._count(others, self.drop) < n:
                    n = self._count(others, self.drop)
                elif self._count(others, self.regain) > n:
                    n = self._count(others, self.regain)
                self.changes += n != self.current
                self.current = n
            return self.current

    @contextmanager
    def run(self, positions: int) -> Iterator[int]:
        n = self.preferred()
        outside = torch.get_num_threads()
        torch.set_num_threads(n)
        self.calls[n] = self.calls.get(n, 0) + 1
        try:
            yield n
        finally:
            torch.set_num_threads(outside)

    def figures(self) -> dict[str, object]:
        return {
            "strategy": self.name,
            "calls": dict(self.calls),
            "changes": self.changes,
            "others_cores": None if self.load.cores is None else round(self.load.cores, 2),
        }
