"""How many CPU threads the encoder runs on: fixed, or chosen by measuring, call by call.

On a machine shared with other work (the video call, the browser, OBS's encoder) torch's
threads fight the other programs for the cores: measured on the 2-core dev machine (AMD EPYC,
avx512_bf16) with other jobs on both cores, the base encoder on 10 s of speech took 4.07 s on 2
threads and 2.12 s on 1 (1.92x; /work/notes/enc_threads.py in the issue-38 note), while on a
quiet machine 2 threads are the faster. Which is faster changes with what else runs, so
`AdaptiveThreads` measures it as it goes: each call runs on the thread count with the lower
recent cost per encoder position, and every `probe_every`-th call (or at once when the current
count's cost changes by a factor `jump`, up or down) tries the other, so a change of load is
seen within a few calls; while probes confirm the choice they come half as often each time
(to one in `max_probe_every`: on a quiet machine a probe on the slower count costs ~1 % of
the encoder's time).

Exactness: only the encoder's thread count changes, and only where its output is bit for bit
the same on every count (`identical_across`, checked once on a real window before adaptation is
allowed: `Engine.adapt_threads`). The decoder's thread count is another matter (a pass over
several rows differs in its last bits): `runtime.decoder_threads` says why its tokens do not.
On a GPU there is nothing to choose (`FixedThreads`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Protocol

import torch

__all__ = ["AdaptiveThreads", "EncoderThreads", "FixedThreads", "identical_across"]

#: Exponential smoothing of each count's seconds per encoder position.
ALPHA = 0.3


class EncoderThreads(Protocol):
    """The strategy: runs one encoder call (``with strategy.run(positions) as threads:``)."""

    name: str

    def run(self, positions: int) -> AbstractContextManager[int]: ...

    def figures(self) -> dict[str, object]: ...


class FixedThreads:
    """torch's thread count as set (the behaviour before issue 38)."""

    name = "fixed"

    @contextmanager
    def run(self, positions: int) -> Iterator[int]:
        yield torch.get_num_threads()

    def figures(self) -> dict[str, object]:
        return {"strategy": self.name, "threads": torch.get_num_threads()}


class AdaptiveThreads:
    """Runs each encoder call on the count among ``counts`` measured fastest lately (see the
    module docstring). Thread-safe enough for one worker thread; the decoder's count (torch's
    setting outside `run`) is restored after every call."""

    name = "adaptive"

    def __init__(
        self,
        counts: Sequence[int],
        probe_every: int = 12,
        max_probe_every: int = 96,
        jump: float = 1.4,
        timer: Callable[[], float] | None = None,
    ) -> None:
        if len(counts) < 2 or min(counts) < 1:
            raise ValueError("adaptive encoder threads need two or more counts >= 1")
        import time

        self.counts = tuple(sorted(set(counts)))
        self.probe_every = probe_every
        self.max_probe_every = max(probe_every, max_probe_every)
        self._interval = probe_every  # doubles while probes confirm the choice
        self.jump = jump
        self._timer = timer or time.perf_counter
        self.cost: dict[int, float | None] = {n: None for n in self.counts}  # s per position
        self.calls: dict[int, int] = {n: 0 for n in self.counts}
        self._since_probe = 0
        self._lock = threading.Lock()

    def choose(self) -> int:
        """The count for the next call: an unmeasured one first, a probe of the other when due,
        else the cheapest lately."""
        with self._lock:
            for n in self.counts:
                if self.cost[n] is None:
                    return n
            best = min(self.counts, key=lambda n: self.cost[n] or 0.0)
            if self._since_probe >= self._interval:
                others = [n for n in self.counts if n != best]
                return min(others, key=lambda n: self.calls[n])
            return best

    def preferred(self) -> int:
        """The count measured cheapest lately (no probe): for work that follows this choice."""
        with self._lock:
            if any(c is None for c in self.cost.values()):
                return max(self.counts)
            return min(self.counts, key=lambda n: self.cost[n] or 0.0)

    def record(self, threads: int, seconds: float, positions: int) -> None:
        """A call on ``threads`` took ``seconds`` for ``positions`` encoder positions."""
        per = seconds / max(1, positions)
        with self._lock:
            old = self.cost[threads]
            best = min(self.counts, key=lambda n: self.cost[n] or float("inf"))
            # the count in use is smoothed; a probe of another is taken as it is (its old
            # figure is from another load: one probe is enough to switch back)
            fresh = old is None or threads != best
            self.cost[threads] = per if fresh or old is None else (1 - ALPHA) * old + ALPHA * per
            self.calls[threads] += 1
            changed = old is not None and not old / self.jump < per < self.jump * old
            if threads == best and changed:
                self._interval = self.probe_every  # the load changed: look at the other now
                self._since_probe = self._interval
            elif threads != best:  # a probe: confirmed (probe less often) or a switch
                kept = min(self.counts, key=lambda n: self.cost[n] or float("inf")) == best
                grown = min(self.max_probe_every, 2 * self._interval)
                self._interval = grown if kept else self.probe_every
                self._since_probe = 0
            else:
                self._since_probe += 1

    @contextmanager
    def run(self, positions: int) -> Iterator[int]:
        n = self.choose()
        outside = torch.get_num_threads()
        torch.set_num_threads(n)
        t0 = self._timer()
        try:
            yield n
        finally:
            self.record(n, self._timer() - t0, positions)
            torch.set_num_threads(outside)

    def figures(self) -> dict[str, object]:
        return {
            "strategy": self.name,
            "calls": dict(self.calls),
            "ms_per_100_positions": {
                n: None if c is None else round(c * 100_000, 2) for n, c in self.cost.items()
            },
        }


def identical_across(encode: Callable[[], torch.Tensor], counts: Sequence[int]) -> bool:
    """Whether ``encode()`` gives the same bits on every thread count of ``counts``."""
    outside = torch.get_num_threads()
    try:
        outs = []
        for n in counts:
            torch.set_num_threads(n)
            outs.append(encode())
        return all(torch.equal(outs[0], o) for o in outs[1:])
    finally:
        torch.set_num_threads(outside)
