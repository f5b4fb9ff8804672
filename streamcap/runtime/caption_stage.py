"""What a caption stage is (`CaptionStage`), and the one thread stages run on.

A stage sits between a live stream's policy and its sink (the speaker labeller,
`runtime.labeller`). Its own module because the stream only calls it, through this Protocol,
and a stage needs nothing of the stream: it is written, and tested, against these two methods.
The thread is here with it because it exists for stages alone: a stage may be slow, so the
captions a feeding thread makes wait for this thread rather than stall the feeder
(`runtime.stream`, the thread contract).
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

import numpy as np

from streamcap.core.captions import CaptionEvent

_STAGE_EXECUTOR: ThreadPoolExecutor | None = None
_STAGE_EXECUTOR_LOCK = threading.Lock()


def stage_executor() -> ThreadPoolExecutor:
    """The process's one thread for caption stages the feeding thread may not run."""
    global _STAGE_EXECUTOR
    with _STAGE_EXECUTOR_LOCK:
        if _STAGE_EXECUTOR is None:
            _STAGE_EXECUTOR = ThreadPoolExecutor(1, thread_name_prefix="caption-stage")
        return _STAGE_EXECUTOR


class CaptionStage(Protocol):
    """A stage between the policy and the sink (e.g. speaker labels from the voice).

    It sees the stream's audio in order (`feed`, 16 kHz mono from stream time 0) and every
    caption event in order (`process`), and answers with the events to deliver instead: the
    same, relabelled, or a final split in two (it then renumbers later segments itself). Both
    run with the stream's lock held: `feed` on the thread that processes the input, `process`
    never on the feeding thread (`runtime.stream`'s docstring), so it may take its time.
    """

    def feed(self, samples: np.ndarray) -> None: ...

    def process(self, event: CaptionEvent) -> list[CaptionEvent]: ...
