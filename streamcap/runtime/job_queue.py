"""The decode jobs waiting for a worker, and the scheduling rules that pick the next ones.

One implementation of the rules, shared by the local `InferenceWorker` and the remote
backend's gateway scheduler (`streamcap.cluster.remote`), so that a stream behaves the same
whether its decodes run on this machine or on a replica:

- finals before partials; finals in the order they were submitted, never dropped;
- at most one partial waits per stream: a newer partial of a stream replaces (drops) the older,
  and a final of a stream drops its waiting partials of the same or an older window; when the
  decoders fall behind they therefore run fewer partials, never fewer finals, and the queue is
  bounded by the number of streams plus the finals;
- among streams, the partial waiting longest goes first.
- a final submitted while its stream's previous final still waits, unstarted, joins it as one
  job when both may (`DecodeJob.coalescable`) and the owner says how (``JobQueue(coalesce=...)``,
  `runtime.coalesce.coalesce_finals` with the owner's tokenizer: the local worker; a replica
  does not yet complete a final the joined decode cut short): a backlog of finals costs one
  encoder call, and the joined job keeps the first one's place and queue time.

Not thread-safe: the owner holds its own lock around every call. Dropped jobs are kept in
`dropped` until the owner's job thread has told them (``on_done``), never from `add` itself.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator

from streamcap.runtime.jobs import DecodeJob, JobKind

#: How many of ``waiting`` jobs of one kind to take together (1: one at a time).
BatchSize = Callable[[int, JobKind], int]
#: One job for a waiting final and a later one of its stream, or None (`runtime.coalesce`).
Coalesce = Callable[[DecodeJob, DecodeJob], DecodeJob | None]


def one_at_a_time(waiting: int, kind: JobKind) -> int:
    return 1


class JobQueue:
    """Finals in order, one partial per stream, and the dropped jobs not yet told."""

    def __init__(self, *, coalesce: Coalesce | None = None) -> None:
        #: joins a stream's backlog of finals (only an owner that completes what a joined
        #: window's decode cut short may: `runtime.coalesce.complete_parts`); None: never
        self.coalesce = coalesce
        self.finals: deque[DecodeJob] = deque()
        self.partials: dict[str, DecodeJob] = {}
        self.dropped: deque[DecodeJob] = deque()  # dropped, ``on_done`` not yet delivered

    def add(self, job: DecodeJob) -> list[DecodeJob]:
        """Queue ``job``; returns the waiting jobs it made stale (now in `dropped`)."""
        if job.kind not in ("partial", "final"):
            raise ValueError(f"job kind must be 'partial' or 'final', got {job.kind!r}")
        old = self.partials.get(job.stream)
        stale: list[DecodeJob] = []
        if job.kind == "final":
            if not (job.coalescable and self._coalesce(job)):
                self.finals.append(job)
            if old is not None and old.window <= job.window:
                stale.append(self.partials.pop(job.stream))
        else:
            if old is not None:
                stale.append(old)
            self.partials[job.stream] = job
        self.dropped.extend(stale)
        return stale

    def _coalesce(self, job: DecodeJob) -> bool:
        """Join ``job`` to its stream's last waiting final, in that one's place, if they
        may (`DecodeJob.coalescable`) and the owner joins finals; whether it was joined."""
        if self.coalesce is None:
            return False
        for i in range(len(self.finals) - 1, -1, -1):
            prev = self.finals[i]
            if prev.stream != job.stream:
                continue
            if not prev.coalescable:
                return False
            joined = self.coalesce(prev, job)
            if joined is None:
                return False
            joined.id, joined.submitted = prev.id, prev.submitted
            self.finals[i] = joined
            return True
        return False

    def take(self, size: BatchSize = one_at_a_time, partials: bool = True) -> list[DecodeJob]:
        """The next jobs: finals first, in order; else (if ``partials``) the partials waiting
        longest. ``size`` says how many of one kind go together (finals and partials never
        share a batch: a final does not wait for a partial's encoder)."""
        if self.finals:
            n = max(1, min(size(len(self.finals), "final"), len(self.finals)))
            return [self.finals.popleft() for _ in range(n)]
        if self.partials and partials:
            waiting = sorted(self.partials.values(), key=lambda j: j.id)
            n = max(1, min(size(len(waiting), "partial"), len(waiting)))
            for job in waiting[:n]:
                del self.partials[job.stream]
            return waiting[:n]
        return []

    def drop_partials(self) -> list[DecodeJob]:
        """Drop every waiting partial (a stop); returns them (now in `dropped`)."""
        stale = list(self.partials.values())
        self.partials.clear()
        self.dropped.extend(stale)
        return stale

    def drop_finals(self) -> list[DecodeJob]:
        """Drop every waiting final (a stop without drain); returns them (now in `dropped`)."""
        stale = list(self.finals)
        self.finals.clear()
        self.dropped.extend(stale)
        return stale

    @property
    def depth(self) -> int:
        """Jobs waiting to run (not counting the dropped ones)."""
        return len(self.finals) + len(self.partials)

    def has_work(self) -> bool:
        return bool(self.finals) or bool(self.partials)

    def waiting(self, stream: str) -> int:
        """Jobs of ``stream`` waiting to run."""
        return sum(j.stream == stream for j in self.finals) + (stream in self.partials)

    def __iter__(self) -> Iterator[DecodeJob]:
        """Every job held: waiting finals and partials, and dropped ones not yet told."""
        yield from self.finals
        yield from self.partials.values()
        yield from self.dropped
