"""Clocks for the live pipeline, and pacing of a file as if it were live.

The same pipeline code runs on ``RealClock`` (wall time, real sleeps) or on ``SimulatedClock``,
which replays hours of audio in minutes yet still yields honest latencies: simulated time moves
forward when audio arrives and when compute is spent, never while idly waiting. It models one
processor serving a live stream: a decode that takes longer than real time pushes every later
event back, exactly as on a real machine.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Protocol, runtime_checkable

import numpy as np

from streamcap.core.constants import SAMPLE_RATE

__all__ = ["Clock", "RealClock", "SimulatedClock"]


class Measurement:
    """Result of ``Clock.measure()``: ``seconds`` is filled in when the block exits."""

    __slots__ = ("seconds",)

    def __init__(self) -> None:
        self.seconds = 0.0


@runtime_checkable
class Clock(Protocol):
    """What the pipeline needs from time."""

    def now(self) -> float:
        """Current time in seconds (origin is arbitrary; only differences matter)."""
        ...

    def wait_until(self, t: float) -> None:
        """Block until ``now() >= t`` (the simulated clock jumps instead of sleeping)."""
        ...

    def charge(self, seconds: float) -> None:
        """Account ``seconds`` of compute done outside ``measure()``."""
        ...

    def measure(self) -> AbstractContextManager[Measurement]:
        """Context manager timing a block of compute (and charging it on a simulated clock).

        Typed as what ``with`` needs, so a ``@contextmanager`` generator method satisfies it.
        """
        ...


class RealClock:
    """Monotonic wall time; compute costs time by itself, so ``charge`` is a no-op."""

    def __init__(self, timer: Callable[[], float] = time.perf_counter) -> None:
        self._timer = timer

    def now(self) -> float:
        return self._timer()

    def wait_until(self, t: float) -> None:
        delay = t - self._timer()
        if delay > 0:
            time.sleep(delay)

    def charge(self, seconds: float) -> None:
        """Nothing to do: the compute already took real time."""

    @contextmanager
    def measure(self) -> Iterator[Measurement]:
        m = Measurement()
        t0 = self._timer()
        try:
            yield m
        finally:
            m.seconds = self._timer() - t0


class SimulatedClock:
    """Computation-aware simulated time.

    - ``advance_audio(s)``: ``s`` more seconds of audio have arrived (counted from ``start``);
      time becomes at least the end of the audio received so far (it does not move if compute
      is already past that point).
    - ``charge(s)`` / ``measure()``: compute happened; time moves forward by its cost.
    - ``wait_until(t)``: jump to ``t`` if it is in the future, without sleeping.

    ``measure`` uses wall time by default (what a real deployment would experience, including
    all threads of a multi-threaded model); pass ``timer=time.process_time`` to ignore machine
    noise. Thread-safe, so a worker thread can charge while a feeder advances audio.
    """

    def __init__(self, start: float = 0.0, timer: Callable[[], float] = time.perf_counter) -> None:
        self._now = float(start)
        self._audio_end = float(start)
        self._timer = timer
        self._lock = threading.Lock()

    def now(self) -> float:
        with self._lock:
            return self._now

    def advance_audio(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError(f"cannot feed negative audio: {seconds}")
        with self._lock:
            self._audio_end += seconds
            self._now = max(self._now, self._audio_end)

    def wait_until(self, t: float) -> None:
        with self._lock:
            self._now = max(self._now, float(t))

    def charge(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError(f"cannot charge negative compute: {seconds}")
        with self._lock:
            self._now += seconds

    @contextmanager
    def measure(self) -> Iterator[Measurement]:
        m = Measurement()
        t0 = self._timer()
        try:
            yield m
        finally:
            m.seconds = max(0.0, self._timer() - t0)
            self.charge(m.seconds)


def paced_chunks(
    audio: np.ndarray | Iterable[np.ndarray],
    chunk_s: float,
    clock: Clock,
    sample_rate: int = SAMPLE_RATE,
    speed: float = 1.0,
) -> Iterator[np.ndarray]:
    """Yield ``audio`` in chunks, each when its last sample would have arrived live.

    ``audio`` is a whole array (cut into ``chunk_s`` pieces) or an iterable of chunks (e.g.
    ``iter_audio_chunks`` for a long file; each is paced by its own length). The stream starts at
    the clock's time of the first ``next()``. With ``RealClock`` this sleeps; with
    ``SimulatedClock`` it jumps the clock forward instead (never backward: after compute that
    overran real time the next chunk is already there and comes at once, as live).
    ``speed`` > 1 replays faster. Deadlines are absolute, so slow consumers do not drift the pace.
    """
    if chunk_s <= 0 or speed <= 0:
        raise ValueError(f"chunk_s and speed must be positive, got {chunk_s}, {speed}")
    if isinstance(audio, np.ndarray):
        size = max(1, round(chunk_s * sample_rate))
        flat = audio.reshape(-1)
        chunks: Iterable[np.ndarray] = (flat[i : i + size] for i in range(0, flat.size, size))
    else:
        chunks = audio
    t0: float | None = None
    fed = 0
    for chunk in chunks:
        if t0 is None:
            t0 = clock.now()
        fed += len(chunk)
        clock.wait_until(t0 + fed / sample_rate / speed)
        yield chunk
