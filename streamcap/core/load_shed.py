"""When a stream falls behind, its partials give way to its finals: the pace as a state table.

On a machine that cannot keep up with everything (the captioner shares a laptop with the video
call, the browser and OBS's encoder), what matters least has to give: partials. A partial
decode costs about as much as a final's and runs on the same worker; every one that starts
while a final waits delays that final by its whole cost, and the worker never preempts. So the
stream measures how far behind it is and asks for fewer partials, then none, until it has
caught up (issue 38). Finals are never thinned, dropped or changed by this: each is still the
exact greedy decode of its window.

*Behind* (`behind_s`), in stream seconds, is what the viewer would feel now: the age of the
oldest decode the stream has ordered and not yet got back (stream time now, less the end of
that decode's audio), plus the measured cost of each further final waiting behind it (they run
one after another) — or, when more, the latency of the decode that came back last: a stream
with one decode out at a time is not caught up the moment it gets a late one back, only when
one comes back in time. A quiet machine keeps it at the decode's own cost (0.3-1 s with base on 2
cores); a machine that cannot keep up sees it grow with every final.

The states (`PACE_TRANSITIONS`), moved only by `LoadShedder.update`:

    LIVE --BEHIND--> THINNED --BEHIND--> PAUSED
    PAUSED --EASED--> THINNED --CAUGHT_UP--> LIVE          (PAUSED --CAUGHT_UP--> LIVE too)

- LIVE: partials at the policy's own interval.
- THINNED (behind by `thin_s` or more): partials at `thin_factor` times the interval, and no
  partial while one of the stream's finals is still being decoded or waits (it would only
  delay that final).
- PAUSED (behind by `pause_s` or more): no partials at all; finals only.
- Back: to THINNED when behind less than `pause_s / 2`, to LIVE when behind less than
  `caught_up_s` (hysteresis, so the pace does not flap with every decode).

Pure: no clock or thread; the stream protocol (`core.stream`) feeds it at every input.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

from streamcap.core.state_machine import StateMachine

__all__ = ["LoadShedConfig", "LoadShedder", "Pace", "PaceEvent", "behind_s"]


class Pace(enum.Enum):
    LIVE = "live"
    THINNED = "thinned"
    PAUSED = "paused"


class PaceEvent(enum.Enum):
    BEHIND = "behind"  # behind by the next state's threshold
    EASED = "eased"  # from PAUSED: behind less than half the pause threshold
    CAUGHT_UP = "caught_up"  # behind less than `caught_up_s`


PACE_TRANSITIONS: Mapping[Pace, Mapping[PaceEvent, Pace]] = {
    Pace.LIVE: {PaceEvent.BEHIND: Pace.THINNED},
    Pace.THINNED: {PaceEvent.BEHIND: Pace.PAUSED, PaceEvent.CAUGHT_UP: Pace.LIVE},
    Pace.PAUSED: {PaceEvent.EASED: Pace.THINNED, PaceEvent.CAUGHT_UP: Pace.LIVE},
}


@dataclass(frozen=True)
class LoadShedConfig:
    """Thresholds in stream seconds behind (see the module docstring).

    - enabled: False keeps partials at the policy's pace whatever the load (the behaviour
      before issue 38; the evaluation's baseline).
    - thin_s: a final's latency on a quiet 2-core machine is p95 ~1.0 s (base, bf16 or fp32):
      behind by more than 1.5 s is load, not the decode's own cost.
    - pause_s: behind by 2.5 s, a final waits for more than a whole partial's cost: stop them.
    - caught_up_s: back to live partials once behind by less than this.
    - thin_factor: THINNED partials come this many times further apart.
    """

    enabled: bool = True
    thin_s: float = 1.5
    pause_s: float = 2.5
    caught_up_s: float = 1.0
    thin_factor: float = 2.0

    def __post_init__(self) -> None:
        if not 0.0 < self.caught_up_s <= self.thin_s <= self.pause_s:
            raise ValueError("load shedding needs 0 < caught_up_s <= thin_s <= pause_s")
        if self.thin_factor < 1.0:
            raise ValueError("thin_factor must be >= 1")


def behind_s(now: float, waiting_ends: list[float], final_cost_s: float | None) -> float:
    """How far behind a stream is at stream time ``now``: the age of its oldest decode not yet
    back (``waiting_ends``: the audio end of each, oldest first; the finals among them and the
    partial), plus the measured cost of each further one (``final_cost_s``; None: unknown, 0)."""
    if not waiting_ends:
        return 0.0
    oldest = max(0.0, now - min(waiting_ends))
    return oldest + max(0, len(waiting_ends) - 1) * (final_cost_s or 0.0)


class LoadShedder:
    """One stream's pace of partials (`Pace`), from how far behind it is."""

    def __init__(self, config: LoadShedConfig | None = None) -> None:
        self.config = config or LoadShedConfig()
        self._machine: StateMachine[Pace, PaceEvent] = StateMachine(PACE_TRANSITIONS, Pace.LIVE)
        self.behind_s = 0.0
        self.worst_s = 0.0
        #: seconds of stream time spent in each pace (for /metrics and the evaluation)
        self.time_in: dict[str, float] = {p.value: 0.0 for p in Pace}
        self.changes = 0
        self._last_now: float | None = None

    @property
    def pace(self) -> Pace:
        return self._machine.state

    def update(self, now: float, behind: float) -> Pace:
        """The pace at stream time ``now``, behind by ``behind`` seconds."""
        if self._last_now is not None and now > self._last_now:
            self.time_in[self.pace.value] += now - self._last_now
        self._last_now = now
        self.behind_s = behind
        self.worst_s = max(self.worst_s, behind)
        if not self.config.enabled:
            return self.pace
        cfg, m = self.config, self._machine
        before = m.state
        if behind < cfg.caught_up_s and m.state is not Pace.LIVE:
            m.fire(PaceEvent.CAUGHT_UP)
        elif m.state is Pace.PAUSED and behind < cfg.pause_s / 2:
            m.fire(PaceEvent.EASED)
        elif m.state is Pace.LIVE and behind >= cfg.thin_s:
            m.fire(PaceEvent.BEHIND)
        if m.state is Pace.THINNED and behind >= cfg.pause_s:
            m.fire(PaceEvent.BEHIND)
        self.changes += m.state is not before
        return m.state

    def interval_scale(self) -> float | None:
        """What the policy's partial interval is multiplied by now; None: no partials."""
        if self.pace is Pace.PAUSED:
            return None
        return self.config.thin_factor if self.pace is Pace.THINNED else 1.0

    @property
    def partial_beside_final(self) -> bool:
        """Whether a partial may start while one of the stream's finals is not back."""
        return self.pace is Pace.LIVE
