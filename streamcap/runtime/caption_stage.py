"""What a caption stage is (`CaptionStage`), and the one thread stages run on.

A stage sits between a live stream's policy and its sink (the speaker labeller,
`runtime.labeller`). Its own module because the stream only calls it, through this Protocol,
and a stage needs nothing of the stream: it is written, and tested, against these two methods.
The thread is here with it because it exists for stages alone: a stage may be slow, so the
captions a feeding thread makes wait for this thread rather than stall the feeder
(`runtime.stream`, the thread contract).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Protocol

import numpy as np

from streamcap.core.captions import CaptionEvent

log = logging.getLogger(__name__)

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


class _Threaded(Protocol):
    @property
    def threaded(self) -> bool: ...


class StagedDelivery:
    """A stream's captions through its stage (if any) to its sink, in order, the stage never
    run on the feeding thread (`runtime.stream`'s thread contract).

    The thread that delivers decode results marks itself with `on_this_thread` while it holds
    the stream's lock; captions made on any other thread (a final whose early decode was
    already back when the pause is confirmed, the end of the stream) are held and handed, in
    order, to `stage_executor`'s thread, and every caption after them waits behind them. With
    no stage, or a worker stepped by its caller (no thread of its own), captions go straight
    to the sink. ``resume`` runs after held captions are delivered, with the lock still held
    (the stream drains its inbox); ``after`` once the lock is let go."""

    def __init__(
        self,
        stage: CaptionStage | None,
        lock: threading.RLock,
        worker: _Threaded,
        sink: Callable[[list[CaptionEvent]], None],
        resume: Callable[[], None],
        after: Callable[[], None],
    ) -> None:
        self._stage = stage
        self._lock = lock
        self._worker = worker
        self._sink = sink
        self._resume = resume
        self._after = after
        self._held: list[CaptionEvent] = []
        self._thread: int | None = None  # the thread that may run the stage now

    @property
    def idle(self) -> bool:
        """No caption is held for the stage's thread."""
        return not self._held

    @contextmanager
    def on_this_thread(self) -> Iterator[None]:
        """The calling thread (holding the lock) may run the stage until the block ends."""
        self._thread = threading.get_ident()
        try:
            yield
        finally:
            self._thread = None

    def deliver(self, captions: list[CaptionEvent]) -> None:
        """``captions`` through the stage to the sink, in order (caller holds the lock); on a
        thread that may not run the stage, held for the stage's thread."""
        stage = self._stage
        if stage is None:
            self._sink(captions)
            return
        if self._thread != threading.get_ident() and self._worker.threaded:
            if captions and not self._held:
                stage_executor().submit(self._deliver_held)
            self._held += captions
            return
        captions, self._held = self._held + captions, []
        staged: list[CaptionEvent] = []
        for cap in captions:
            try:
                staged += stage.process(cap)
            except Exception:  # a stage's bug must not lose a caption
                log.exception("a caption stage failed; the caption goes on unstaged")
                staged.append(cap)
        self._sink(staged)

    def _deliver_held(self) -> None:
        """On the stage's thread: deliver the held captions, then let the stream resume."""
        with self._lock, self.on_this_thread():
            self.deliver([])
            self._resume()
        self._after()
