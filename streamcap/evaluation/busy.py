"""Competing load for a measured run: N other processes that each keep one core busy.

People caption on machines that do other work (the video call, the browser, OBS's encoder),
so the figures that matter are also measured while something else takes CPU (issue 38:
`--busy N` in `eval_stream` and `load_test`). Each busy process runs a single-threaded numpy
loop (matrix products of a size that stays in cache, as an encoder or a game would), not a
sleep loop, at normal priority; the context manager starts them before the measured part and
stops them (by PID) after, whatever happens. A run killed from outside cannot stop them, so each
also stops itself once its parent is gone (an orphan kept a core busy for 20 minutes of later
measurements before this: issue 38's note).
"""

from __future__ import annotations

import multiprocessing as mp
import os
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["busy_processes"]


def _spin(parent: int) -> None:  # pragma: no cover - runs in the child process
    os.environ["OMP_NUM_THREADS"] = "1"
    import numpy as np

    a = np.random.default_rng(0).standard_normal((192, 192)).astype(np.float32)
    while os.getppid() == parent:  # the parent gone (killed): stop
        for _ in range(200):
            a = np.tanh(a @ a.T * 1e-2)


@contextmanager
def busy_processes(processes: int) -> Iterator[list[int]]:
    """``processes`` busy processes while the block runs; yields their PIDs."""
    ctx = mp.get_context("spawn")  # a fresh interpreter: no torch threads inherited
    me = os.getpid()
    procs = [
        ctx.Process(target=_spin, args=(me,), daemon=True, name=f"busy-{i}")
        for i in range(processes)
    ]
    for p in procs:
        p.start()
    try:
        yield [p.pid for p in procs if p.pid is not None]
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.join(5)
