"""Admission control: how many live streams one inference worker can serve, from measurement.

A live stream's finals must be decoded (exactly, on Whisper's full 30 s input); its partials are
previews that the worker sheds when it falls behind (a stream has at most one waiting, the
newest; finals always go first). So the load that decides whether one more stream fits is the
*finals'* share of the worker: measured here as worker seconds spent on finals per second of
stream time, averaged over a sliding window. A new stream is admitted while the streams then
connected would keep the finals' share under `max_finals_load` (the rest of the worker is what
partials get), and while the finals waiting now are not already late.

A stream here is a *talk channel*: a room's publishers take turns, so a room's finals cost about
what one talker's do, and the meter counts rooms, not publishers. A publisher who joins a room
that is already live adds no stream to the projection; it is refused only on what is measured:
finals that wait too long, or finals that already take more of the worker than the limit (two
people of one room who talk at once show up there within seconds). Partials are not counted:
they fill whatever the worker has left and are shed first.

Before any measurement the rule uses a prior, a final's cost measured once at start-up divided
by the speech time per final (`CapacityConfig.speech_s_per_final`). It is pure logic: callers
pass the times (`now`, monotonic seconds) in, as the policy and the segmenter do.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

__all__ = ["Admission", "CapacityConfig", "Load"]

#: How many of the latest finals' queue waits say whether finals are late now.
RECENT_FINALS = 10
#: Headroom of the limit while only the prior speaks (see `admit`).
PRIOR_SLACK = 1.25


@dataclass(frozen=True)
class CapacityConfig:
    """Admission tuning.

    - max_finals_load: share of the worker the admitted streams' finals may take (0-1); the
      rest is left for partials and for bursts (several streams ending utterances at once).
      0.25 from `scripts/load_test.py` on a 2-core CPU without native bf16: 3 streams of
      recorded speech, whose finals took 0.47 of the worker, had p95 final latency 5.6 s, and
      2 (0.31) had p95 3.2 s over 10 minutes; 1 (0.16) fits. A CPU with a bf16 encoder (0.29
      s instead of 0.74 s per final) fits 3 at 0.25.
    - max_final_wait_s: a new stream is refused while recent finals waited longer than this.
    - window_s: the sliding window of the measurement.
    - min_evidence_s: stream-seconds of measurement before it replaces the prior.
    - speech_s_per_final: stream time per final (utterance), for the prior: 5.7 s on the
      recorded dev file lf3 (57 finals in 327 s).
    """

    max_finals_load: float = 0.25
    max_final_wait_s: float = 1.5
    window_s: float = 60.0
    min_evidence_s: float = 30.0
    speech_s_per_final: float = 5.7

    def __post_init__(self) -> None:
        if not self.max_finals_load > 0:  # inf: never refuse for load (tests)
            raise ValueError("max_finals_load must be positive")
        if self.window_s <= 0 or self.speech_s_per_final <= 0:
            raise ValueError("window_s and speech_s_per_final must be positive")


@dataclass(frozen=True)
class Load:
    """The worker's load over the window, as measured."""

    busy: float = 0.0  # worker seconds per wall second, all jobs
    finals: float = 0.0  # ... finals only
    partials: float = 0.0
    stream_seconds: float = 0.0  # stream time served in the window (streams x seconds)
    per_stream_finals: float = math.nan  # finals' worker seconds per stream second (measured)
    final_wait_p95_s: float = 0.0  # queue wait of the latest finals (RECENT_FINALS)
    window_s: float = 0.0


@dataclass(frozen=True)
class Admission:
    """Whether one more stream fits, and why."""

    ok: bool
    reason: str
    per_stream: float  # finals' load of one stream used for the decision
    projected: float  # finals' load with the new stream
    capacity: int  # streams the worker carries at this per-stream load


class LoadMeter:
    """Jobs finished and streams connected, kept over a sliding window (not thread-safe: the
    worker calls it under its lock)."""

    def __init__(self, config: CapacityConfig | None = None) -> None:
        self.config = config or CapacityConfig()
        self._jobs: deque[tuple[float, bool, float, float]] = deque()  # t, final, busy, wait
        self._streams = 0
        self._streams_since = 0.0
        self._spans: deque[tuple[float, float, int]] = deque()  # t0, t1, streams connected
        self._started: float | None = None
        #: finals' worker seconds per stream second before there is evidence (None: admit)
        self.prior: float | None = None

    def set_prior(self, final_cost_s: float) -> None:
        """The cost of one final (measured at start-up) gives the prior per-stream load."""
        self.prior = final_cost_s / self.config.speech_s_per_final

    def streams_changed(self, now: float, streams: int) -> None:
        """The number of live streams is now ``streams``."""
        self._close_span(now)
        self._streams = max(0, streams)

    def job_done(self, now: float, final: bool, compute_s: float, queued_s: float) -> None:
        if self._started is None:
            self._started = now - compute_s
        self._jobs.append((now, final, compute_s, queued_s))
        self._trim(now)

    def _close_span(self, now: float) -> None:
        if self._started is None:
            self._started = now
        if self._streams and now > self._streams_since:
            self._spans.append((self._streams_since, now, self._streams))
        self._streams_since = now

    def _trim(self, now: float) -> None:
        horizon = now - self.config.window_s
        while self._jobs and self._jobs[0][0] < horizon:
            self._jobs.popleft()
        while self._spans and self._spans[0][1] < horizon:
            self._spans.popleft()

    def load(self, now: float) -> Load:
        self._close_span(now)
        self._trim(now)
        start = max(now - self.config.window_s, self._started if self._started is not None else now)
        wall = max(1e-9, now - start)
        finals = sum(c for t, f, c, _ in self._jobs if f)
        partials = sum(c for t, f, c, _ in self._jobs if not f)
        stream_s = sum(n * (t1 - max(t0, start)) for t0, t1, n in self._spans if t1 > start)
        waits = sorted([w for _, f, _, w in self._jobs if f][-RECENT_FINALS:])
        p95 = waits[min(len(waits) - 1, math.ceil(0.95 * len(waits)) - 1)] if waits else 0.0
        return Load(
            busy=(finals + partials) / wall,
            finals=finals / wall,
            partials=partials / wall,
            stream_seconds=stream_s,
            per_stream_finals=finals / stream_s if stream_s > 0 else math.nan,
            final_wait_p95_s=p95,
            window_s=wall,
        )


def _pct(x: float) -> str:
    return f"{x * 100:.0f} %"


def admit(
    load: Load,
    streams: int,
    prior: float | None,
    config: CapacityConfig,
    joins_room: bool = False,
) -> Admission:
    """May one more publisher join ``streams`` live ones? (the module docstring's rule)

    ``joins_room``: the publisher joins a room that is live already (it shares the room's
    talking time: no new stream in the projection). On the prior alone (no evidence yet) the
    limit has `PRIOR_SLACK`: a warm-up that shared the CPU with something else overstates a
    final's cost, and measurement takes over soon.
    """
    per = prior if prior is not None else 0.0
    limit = config.max_finals_load * PRIOR_SLACK
    measured = load.stream_seconds >= config.min_evidence_s and not math.isnan(
        load.per_stream_finals
    )
    if measured:
        # trust the measurement, but a prior that says more (a burst of long finals is not in
        # the window yet) is not overruled by a quiet minute until it has weight
        weight = min(1.0, load.stream_seconds / (4 * config.min_evidence_s))
        per = weight * load.per_stream_finals + (1 - weight) * max(per, load.per_stream_finals)
        limit = config.max_finals_load
    capacity = 10**6
    if per > 0 and math.isfinite(limit):
        capacity = math.floor(limit / per)
    added = 0 if joins_room else 1
    projected = (streams + added) * per
    if streams == 0:
        return Admission(True, "first stream", per, projected, capacity)
    if load.final_wait_p95_s > config.max_final_wait_s:
        why = (
            f"finals wait {load.final_wait_p95_s:.1f} s for the worker; "
            f"the limit is {config.max_final_wait_s:g} s"
        )
        return Admission(False, why, per, projected, capacity)
    if load.window_s >= config.min_evidence_s and load.finals > config.max_finals_load:
        why = (
            f"the worker spends {_pct(load.finals)} of its time on finals; "
            f"the limit is {_pct(config.max_finals_load)}"
        )
        return Admission(False, why, per, projected, capacity)
    if projected > limit and not joins_room:  # a live room was admitted: its talk is charged
        live = f"{streams} live stream{'s' if streams != 1 else ''}"
        why = (
            f"the finals of {live} take {_pct(streams * per)} of the worker; one more would "
            f"take {_pct(projected)}, over the limit of {_pct(limit)} "
            f"(about {capacity} stream{'s' if capacity != 1 else ''} fit)"
        )
        return Admission(False, why, per, projected, capacity)
    return Admission(True, "joins a live room" if joins_room else "fits", per, projected, capacity)
