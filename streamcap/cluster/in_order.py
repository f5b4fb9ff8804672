"""The order the gateway tells outcomes in: a stream's finals as they were submitted.

Its own small class because it is one rule with its own books: a stream's finals may finish out
of order on the Ray backend (on two replicas, or one resent after a loss), and a stream's policy
must hear them in the order it asked. The gateway's scheduler (`cluster.remote`) records each
final it accepts, hands every outcome here as it comes, and tells what `take` gives it; it
calls every method with its lock held, and nothing here waits.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator

from streamcap.runtime.jobs import DecodeJob, JobOutcome


class FinalsInOrder:
    """Outcomes to tell: a partial's at once, a final's once its stream's earlier finals were."""

    def __init__(self) -> None:
        self._order: dict[str, deque[int]] = {}  # per stream: ids of finals not yet told
        self._held: dict[int, tuple[DecodeJob, JobOutcome]] = {}  # done, earlier final pending
        self._ready: deque[tuple[DecodeJob, JobOutcome]] = deque()  # outcomes to tell

    def accepted(self, job: DecodeJob) -> None:
        """A job was accepted: a final is told in this order."""
        if job.kind == "final":
            self._order.setdefault(job.stream, deque()).append(job.id)

    def done(self, job: DecodeJob, outcome: JobOutcome) -> None:
        """A job's outcome, to be told when its turn comes."""
        if job.kind != "final":
            self._ready.append((job, outcome))
            return
        self._held[job.id] = (job, outcome)
        order = self._order.get(job.stream)
        while order and order[0] in self._held:
            self._ready.append(self._held.pop(order.popleft()))
        if order is not None and not order:
            del self._order[job.stream]

    def take(self) -> list[tuple[DecodeJob, JobOutcome]]:
        """The outcomes to tell now, in order (they are forgotten here)."""
        tell = list(self._ready)
        self._ready.clear()
        return tell

    def jobs(self) -> Iterator[DecodeJob]:
        """Jobs done but not yet told (waiting for an earlier final, or to be taken)."""
        yield from (j for j, _ in self._held.values())
        yield from (j for j, _ in self._ready)
