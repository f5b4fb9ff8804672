"""The gateway's scheduler for remote inference: a worker whose decodes run on replicas.

`RemoteWorker` is a `runtime.worker_api.Worker` on the scheduler core the local
`InferenceWorker` is built on too (`runtime.scheduler`: queue, books, admission, lifecycle), so
nothing above it changes. Its decodes go out through a `Transport` (Ray Serve replicas through
the bridge process, or the local fallback) and it keeps the local worker's rules across them:

- the queue is `runtime.job_queue` (finals first, in order; one partial waits per stream;
  stale partials dropped), so the gateway's backlog is bounded as the local worker's is;
- at most ``replica_inflight`` requests per usable replica are in flight, partials at most
  all but one of each replica's slots, so a final always finds room; nothing is sent while no
  replica is usable, so no request piles up where it could be neither reordered nor dropped;
- a final lost with its replica (killed, unreachable, timed out) is resent, as the identical
  request, before every other job, up to ``max_attempts`` times; a lost partial is dropped
  (the next one follows within the partial interval);
- every job's ``on_done`` runs exactly once: the first reply for a request wins, a later one
  (a "dead" replica that had finished after all) is counted and ignored; a stream's finals are
  delivered in the order they were submitted, even when they finish on different replicas;
- a final that cannot be decoded within ``final_deadline_s`` (no replica came back, no
  fallback) is delivered as an error, which the policy turns into the words it has: bounded
  waiting, never a lost caption;
- with a fallback transport (``--fallback local``), work goes there while no replica has been
  usable for ``fallback_after_s``, and back to the replicas when they return.

One module, longer than most: the requests in flight and the resends are one state machine
under the core's lock, and its invariants read best in one place. Apart from it: the books
(`cluster.books`), the order finals are told in (`cluster.in_order`), an attempt and its
request (`cluster.attempt`), and the rules (`cluster.remote_config.RemoteConfig`).

Thread contract (`runtime.worker_api`): one dispatcher thread (`start`) runs ``prepare``,
sends, and every ``on_done``; transports hand their events to `on_event` from any thread.
`submit` never runs a callback.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections import deque
from collections.abc import Iterable
from typing import TYPE_CHECKING

from streamcap.core.capacity import CapacityConfig
from streamcap.models.card import ModelCard, RemotePlacement
from streamcap.runtime.jobs import DecodeJob, JobOutcome
from streamcap.runtime.scheduler import Scheduler

from .attempt import Attempt, request_key
from .books import RemoteBooks
from .in_order import FinalsInOrder
from .remote_config import RemoteConfig
from .transport import Described, Lost, Replied, Routed, Status, Transport, TransportEvent
from .wire import ReplicaReply

if TYPE_CHECKING:
    from streamcap.runtime.worker_api import ModelInfo
    from streamcap.runtime.worker_status import RemoteStatus

__all__ = ["RemoteWorker"]

log = logging.getLogger(__name__)

#: reasons a request is lost (a fixed set: metric labels)
LOST_REASONS = ("died", "unavailable", "timeout", "bridge", "rejected")


class RemoteDecodeError(RuntimeError):
    """A decode failed on a replica (the replica's own exception, as text)."""


class RemoteUnavailable(RuntimeError):
    """A final could not be decoded in time: no replica answered, and no fallback."""


class RemoteWorker(Scheduler):
    """A worker whose decodes run on replicas behind ``transport`` (module docstring)."""

    def __init__(
        self,
        engine: ModelInfo,
        transport: Transport,
        *,
        config: RemoteConfig | None = None,
        capacity: CapacityConfig | None = None,
        fallback: Transport | None = None,
        name: str = "streamcap-remote",
    ) -> None:
        # the costs: a mirror of the replicas', fed from their replies
        super().__init__(name=name, capacity=capacity)
        self.engine = engine  # a `ModelCard`: tokenizer and languages, no weights
        self.config = config or RemoteConfig()
        self.gateway = uuid.uuid4().hex[:8]  # request keys and replica-side stream names
        self._transport = transport
        self._fallback = fallback
        self._inbox: deque[TransportEvent] = deque()
        self._resend: deque[Attempt] = deque()  # lost finals, first in line
        self._inflight: dict[str, Attempt] = {}
        self._told = FinalsInOrder()  # outcomes to tell, a stream's finals in order
        self.remote_books = RemoteBooks()  # the replicas' work, losses and resends
        self._status = Status(connected=False, running=0)
        self._unusable_since: float | None = time.monotonic()

    # ------------------------------------------------------------------ lifecycle

    def connect(self) -> RemoteWorker:
        """Start the transports (a `UserError` in one line when the cluster is not there)."""
        self._transport.start(self.on_event)
        if self._fallback is not None:
            self._fallback.start(self._on_fallback_event)
        return self

    def _stopped(self) -> None:
        """`stop` waited for the finals (with ``drain``) and the dispatcher: the transports
        close."""
        self._transport.close()
        if self._fallback is not None:
            self._fallback.close()

    def warm_up(self, language: str | None = None) -> float:
        """Wait for the first usable replica (`RemoteConfig.start_timeout_s`) and take the
        prior of admission control from the replicas' own warm-up; returns it."""
        deadline = time.monotonic() + self.config.start_timeout_s
        with self._cond:
            while self._usable() == 0:
                left = deadline - time.monotonic()
                if left <= 0 or self._status.error:
                    from streamcap.errors import UserError

                    why = self._status.error or (
                        f"no replica running after {self.config.start_timeout_s:.0f} s"
                    )
                    raise UserError(f"--backend ray: {why}")
                self._cond.wait(min(left, 0.5))
            cost = self.remote_books.final_cost() or 1.0
        self._set_prior(cost)
        return cost

    # ------------------------------------------------------------------ the core's hooks

    def _accepted(self, job: DecodeJob) -> None:
        self._told.accepted(job)  # a final is told in this order (`_done`)

    def _depth(self) -> int:
        """Jobs waiting in the gateway (not counting those in flight)."""
        return self._queue.depth + len(self._resend)

    def _taken(self) -> Iterable[DecodeJob]:
        yield from (a.job for a in self._resend)
        yield from (a.job for a in self._inflight.values())
        yield from self._told.jobs()

    def _decoders(self) -> int:
        """Every usable replica (or the fallback's one) has its own finals budget."""
        return max(1, self._usable())

    # ------------------------------------------------------------------ events in

    def on_event(self, event: TransportEvent) -> None:
        """A transport's news (any thread): the cluster's status at once (it is bookkeeping,
        and `warm_up` waits on it before the dispatcher runs), the rest on the dispatcher."""
        with self._cond:
            if isinstance(event, Status):
                self._on_status(event)
            elif isinstance(event, Described):
                self.remote_books.replica(event.info)
                if isinstance(self.engine, ModelCard):  # streamcap_engine_info says where
                    info = event.info
                    self.engine.placement = RemotePlacement(f"ray:{info.device}", info.precision)
            else:
                self._inbox.append(event)
            self._cond.notify_all()

    def _on_fallback_event(self, event: TransportEvent) -> None:
        if isinstance(event, (Status, Described)):
            return  # the fallback is always there; it says nothing of the cluster
        self.on_event(event)

    # ------------------------------------------------------------------ the dispatcher

    def _loop(self) -> None:
        while True:
            self._deliver_dropped()
            with self._cond:
                self._handle_inbox()
                self._expire(time.monotonic())
                sends = self._take()
                tell = self._told.take()
                if not (sends or tell or self._inbox or self._queue.dropped):
                    if self._stopping:
                        return
                    self._cond.wait(0.5)
                    continue
            for job, outcome in tell:
                self._tell(job, outcome)
            for attempt in sends:
                self._send(attempt)
            if tell:
                with self._cond:
                    self._cond.notify_all()

    def _usable(self) -> int:
        return self._status.running if self._status.connected else 0

    def _route(self, now: float) -> str | None:
        """Where new work goes now: the replicas, the fallback, or nowhere (it waits)."""
        if self._usable() > 0:
            self._unusable_since = None
            return "remote"
        if self._unusable_since is None:
            self._unusable_since = now
        if self._fallback is not None and now - self._unusable_since >= (
            self.config.fallback_after_s
        ):
            return "fallback"
        return None

    def _take(self) -> list[Attempt]:
        """What to send now, within the in-flight bounds (caller holds the lock)."""
        now = time.monotonic()
        via = self._route(now)
        if via is None:
            return []
        k = self.config.replica_inflight
        replicas = self._usable() if via == "remote" else 1
        capacity = k * replicas
        partial_cap = capacity - replicas if k > 1 else capacity
        busy = [a for a in self._inflight.values() if a.via == via]
        partials = sum(a.job.kind == "partial" for a in busy)
        free = capacity - len(busy)
        out: list[Attempt] = []
        while free > 0 and self._resend:
            attempt = self._resend.popleft()
            attempt.via = via
            out.append(attempt)
            free -= 1
        while free > 0:
            jobs = self._queue.take(partials=partials < partial_cap)
            if not jobs:
                break
            job = jobs[0]
            partials += job.kind == "partial"
            out.append(Attempt(job, None, via))
            free -= 1
        for attempt in out:
            attempt.sent_at = now
            self._inflight[request_key(self.gateway, attempt.job)] = attempt
        return out

    def _send(self, attempt: Attempt) -> None:
        """Prepare (first attempt only: a resend is the identical request) and send."""
        job = attempt.job
        key = request_key(self.gateway, job)
        if attempt.request is None:
            try:
                attempt.request = attempt.build_request(key, self.gateway, self.engine)
            except Exception as e:  # a bad job must not stop the others
                with self._cond:
                    self._inflight.pop(key, None)
                    self._done(job, JobOutcome(error=e))
                return
        transport = self._transport if attempt.via == "remote" else self._fallback
        assert transport is not None
        if attempt.via == "fallback":
            self.remote_books.fallback_jobs += 1
        try:
            transport.send(attempt.request)
        except Exception as e:  # the transport is gone: as if lost
            self.on_event(Lost(key, "bridge", str(e)))

    # ------------------------------------------------------------------ events, handled

    def _handle_inbox(self) -> None:
        while self._inbox:
            event = self._inbox.popleft()
            if isinstance(event, Replied):
                self._replied(event.reply)
            elif isinstance(event, Lost):
                self._lost(event)
            elif isinstance(event, Routed):
                attempt = self._inflight.get(event.key)
                if attempt is not None:
                    attempt.replica = event.replica

    def _on_status(self, status: Status) -> None:
        was = self._usable(), self._status.connected
        self._status = status
        self.remote_books.running(status.replicas)
        if (self._usable(), status.connected) != was:
            log.info(
                "cluster: %s, %d replica(s) running%s",
                "connected" if status.connected else "not connected",
                status.running,
                f" ({status.error})" if status.error else "",
            )

    def _replied(self, reply: ReplicaReply) -> None:
        attempt = self._inflight.pop(reply.key, None)
        if attempt is None:
            self.remote_books.duplicates += 1  # the first reply for it was delivered already
            return
        job = attempt.job
        self.remote_books.replied(job.kind, reply, time.monotonic() - attempt.sent_at)
        if reply.result is not None:
            self.costs.observe_job(job.kind, reply.encoder_s, reply.decoder_s)
        outcome = JobOutcome(
            result=reply.result,
            dropped=reply.dropped,
            error=RemoteDecodeError(reply.error) if reply.error else None,
            encoder_s=reply.encoder_s,
            decoder_s=reply.decoder_s,
            compute_s=reply.compute_s,
            queued_s=time.perf_counter() - job.submitted - reply.compute_s,
            context_s=reply.context_s,
            options=attempt.request.options if attempt.request else None,
            hypothesis=attempt.request.hypothesis if attempt.request else None,
            batch=reply.batch,
            rechecked=reply.rechecked,
        )
        self._done(job, outcome)

    def _lost(self, event: Lost) -> None:
        attempt = self._inflight.pop(event.key, None)
        if attempt is None:
            return
        reason = event.reason if event.reason in LOST_REASONS else "unavailable"
        self.remote_books.lost[reason] += 1
        if reason == "died":
            self.remote_books.died(event.replica or attempt.replica)
        job = attempt.job
        if reason == "rejected" and job.kind == "final":  # never reached a replica
            self._resend.appendleft(attempt)
            return
        if job.kind == "partial":
            self._drop_lost(job)
            return
        if attempt.attempts >= self.config.max_attempts:
            log.warning("final %s of stream %r lost %d times: given up (%s)", event.key,
                        job.stream, attempt.attempts, event.detail)  # fmt: skip
            self._done(job, JobOutcome(error=RemoteUnavailable(f"lost: {event.detail}")))
            return
        attempt.attempts += 1
        attempt.replica = None
        self.remote_books.finals_resent += 1
        self._resend.append(attempt)
        log.warning(
            "replica %s lost a final of stream %r (%s: %s): resending it (attempt %d)",
            event.replica or attempt.replica or "?", job.stream, reason, event.detail,
            attempt.attempts,
        )  # fmt: skip

    def _drop_lost(self, job: DecodeJob) -> None:
        self.remote_books.partials_lost += 1
        self._books.dropped(job)
        self._told.done(job, JobOutcome(dropped=True))

    def _expire(self, now: float) -> None:
        """Finals past their deadline while waiting (no replica, no fallback): errors."""
        limit = self.config.final_deadline_s
        wall = time.perf_counter()
        late = [a for a in self._resend if wall - a.job.submitted > limit]
        for a in late:
            self._resend.remove(a)
        if self._route(now) is None:
            while self._queue.finals and wall - self._queue.finals[0].submitted > limit:
                job = self._queue.finals.popleft()
                late.append(Attempt(job, None, "none"))
        for a in late:
            self.remote_books.deadline_errors += 1
            log.warning("final of stream %r undecoded after %.0f s: no replica", a.job.stream,
                        limit)  # fmt: skip
            self._done(a.job, JobOutcome(error=RemoteUnavailable("no replica in time")))

    def _done(self, job: DecodeJob, outcome: JobOutcome) -> None:
        """Count a job in and queue its telling, a stream's finals in order (lock held)."""
        self._books.finished(job, outcome)
        self._told.done(job, outcome)

    # ------------------------------------------------------------------ health

    def health(self) -> str:
        """One line for /healthz: the replicas, and what the gateway does without them."""
        with self._cond:
            usable, target = self._usable(), self._status.target
            waiting = len(self._queue.finals) + len(self._resend)
            via = self._route(time.monotonic())
        state = "ok" if usable else "degraded"
        parts = [f"ray: {usable}/{target or '?'} replicas"]
        if not self._status.connected:
            parts = ["ray: not connected"]
        if via == "fallback":
            parts.append("fallback local")
        elif usable == 0 and waiting:
            parts.append(f"{waiting} finals waiting")
        return f"{state} ({'; '.join(parts)})"

    def usable(self) -> bool:
        """True while new work has somewhere to go (replicas, or the fallback)."""
        with self._cond:
            return self._usable() > 0 or self._fallback is not None

    def remote_status(self) -> RemoteStatus:
        """What /metrics publishes of the backend (read at scrape time)."""
        with self._cond:
            pending = [(a.job.kind, a.replica) for a in self._inflight.values()]
            return self.remote_books.status(
                pending,
                connected=self._status.connected,
                running=self._usable(),
                target=self._status.target,
                fallback_active=self._route(time.monotonic()) == "fallback",
            )
