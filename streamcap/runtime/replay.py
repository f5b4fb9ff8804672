"""Replaying a recording through a live stream as if it arrived live (`replay`).

Its own module because it drives a stream from outside, as a microphone or a client would: it
feeds audio at the pace of a clock with the one pacer (`clock.paced_chunks`), and on the
computation-aware `SimulatedClock` it also steps the worker (`_SteppingClock`), so that one
processor's compute and the audio's arrival interleave as they would live. The stream itself
(`runtime.stream`) knows nothing of pacing.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

from streamcap.core.constants import SAMPLE_RATE
from streamcap.runtime.clock import Clock, SimulatedClock, paced_chunks
from streamcap.runtime.worker_api import Worker

if TYPE_CHECKING:
    from streamcap.runtime.stream import LiveStream


class _SteppingClock:
    """A `SimulatedClock` seen by the pacer: waiting until a time first runs the worker's jobs
    that start before it, so one processor's compute and the audio's arrival interleave as live."""

    def __init__(self, clock: SimulatedClock, worker: Worker) -> None:
        self._clock = clock
        self._worker = worker

    def now(self) -> float:
        return self._clock.now()

    def wait_until(self, t: float) -> None:
        while self._clock.now() < t and self._worker.run_one():
            pass
        self._clock.wait_until(t)

    def charge(self, seconds: float) -> None:
        self._clock.charge(seconds)

    def measure(self) -> Any:
        return self._clock.measure()


def replay(
    stream: LiveStream,
    audio: np.ndarray | Iterable[np.ndarray],
    chunk_s: float = 0.1,
    speed: float = 1.0,
    finish: bool = True,
) -> None:
    """Feed ``audio`` (16 kHz mono) through ``stream`` as if it arrived live.

    On a `SimulatedClock` the worker must not run its own thread: this function steps it, so
    each job starts when the (single) processor is free and takes the time it really takes,
    while audio that arrived meanwhile is fed before the next job is chosen. On a real clock
    the worker's thread runs (started here if needed) and feeding sleeps to keep pace.
    """
    clock = stream.clock
    worker = stream.worker
    if not isinstance(worker, Worker):  # started or stepped here: more than a stream needs
        raise TypeError("replay runs the stream's worker: it must be a whole `Worker`")
    simulated = isinstance(clock, SimulatedClock)
    if simulated and worker.threaded:
        raise RuntimeError("replay on a SimulatedClock steps the worker: do not start its thread")
    if not simulated and not worker.threaded:
        worker.start()
    pace: Clock = _SteppingClock(clock, worker) if isinstance(clock, SimulatedClock) else clock
    for chunk in paced_chunks(audio, chunk_s, pace, SAMPLE_RATE, speed):
        stream.feed(chunk)
    if finish:
        stream.finish()
        stream.wait_idle()
