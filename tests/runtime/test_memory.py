"""The C heap figures and trimming (issue 25), and the encoder-context grid that bounds a live
server's kernel shapes (`CONTEXT_STEP_POSITIONS`: 0.2 s). No model: pure functions and glibc."""

from __future__ import annotations

import platform
import subprocess
import sys

import numpy as np
import pytest

from streamcap.core.constants import ENCODER_POSITIONS, SAMPLE_RATE
from streamcap.decoding.batched_encode import CONTEXT_STEP_POSITIONS, context_positions
from streamcap.runtime import memory
from streamcap.runtime.memory import HeapTrimmer

STEP = CONTEXT_STEP_POSITIONS  # 10: the 0.2 s grid chosen in issue 25

glibc = pytest.mark.skipif(
    platform.libc_ver()[0] != "glibc", reason="mallinfo2/malloc_trim are glibc's"
)


_HEAP_PROBE = """
import ctypes
from streamcap.runtime.memory import heap_figures, trim_heap
before = heap_figures()
assert set(before) == {"in_use", "free", "mmapped"}, before
# many small blocks (below the mmap threshold) land in the heap itself
blocks = [ctypes.create_string_buffer(4096) for _ in range(20_000)]
grown = heap_figures()
assert grown["in_use"] > before["in_use"] + 50e6, (before, grown)
del blocks
freed = heap_figures()
assert freed["in_use"] < grown["in_use"] - 50e6, (grown, freed)
trim_heap()
assert heap_figures()["free"] <= freed["free"], freed
"""


@glibc
def test_heap_figures_see_an_allocation_and_trim_gives_pages_back() -> None:
    # The figures are the whole process's: in the test process other threads (a server
    # fixture's, a finished stream's) free memory at any moment (CI saw in_use fall while
    # 80 MB were allocated), so the probe runs in a fresh interpreter where it is alone.
    done = subprocess.run(
        [sys.executable, "-c", _HEAP_PROBE], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr


def test_trimmer_trims_once_per_burst_of_work_and_not_too_often(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[int] = []
    monkeypatch.setattr(memory, "trim_heap", lambda: calls.append(1) or True)
    t = HeapTrimmer(interval_s=0.0)
    t.idle()
    assert calls == []  # nothing ran yet
    t.worked()
    t.idle()
    t.idle()
    assert len(calls) == 1  # once per burst
    slow = HeapTrimmer(interval_s=3600.0)
    slow.worked()
    slow.idle()
    slow.worked()
    slow.idle()
    assert len(calls) == 2 and slow.trims == 1  # at most every interval_s


@pytest.mark.parametrize("context_s", [None, 6.0, 6.01, 7.37, 12.0, 29.99, 40.0])
@pytest.mark.parametrize("audio_s", [0.5, 8.2, 14.0, 30.0])
def test_context_lengths_lie_on_the_grid_and_cover_the_audio(
    context_s: float | None, audio_s: float
) -> None:
    samples = int(audio_s * SAMPLE_RATE)
    assert context_positions(samples, context_s) == context_positions(samples, context_s, STEP)
    n = context_positions(samples, context_s, STEP)
    if context_s is None or max(context_s, audio_s) >= 29.5:
        assert n is None  # the full 30 s window
        return
    assert n is not None and n % STEP == 0 and n < ENCODER_POSITIONS
    assert n >= max(context_s, audio_s) * 50 - 1e-6  # never shorter than asked or the audio
    assert n < max(context_s, audio_s) * 50 + STEP  # at most one step more


def test_a_live_streams_partials_use_few_distinct_shapes() -> None:
    rng = np.random.default_rng(0)
    audio_s = rng.uniform(1, 27, 5000)
    on = {context_positions(int(a * SAMPLE_RATE), a + 2.0, STEP) for a in audio_s}
    off = {context_positions(int(a * SAMPLE_RATE), a + 2.0, 1) for a in audio_s}
    assert STEP > 1 and len(on) <= 1500 // STEP  # a shape per step of the 30 s window at most
    assert len(off) > 1000  # one length per 20 ms of context without the grid
