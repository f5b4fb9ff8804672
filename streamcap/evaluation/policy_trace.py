"""The caption policy's traces: every call it gets and every answer it gives, recorded and
checked (scripts/policy_replay.py).

`make_recorder` makes a `CaptionPolicy` that logs each call with its answer and the policy's
counters after it; `check` replays a trace's calls on a fresh policy of this checkout and stops
at the first answer that differs; `count_transitions` counts the `policy_states` transitions a
check takes.
"""

from __future__ import annotations

import collections
import hashlib
from typing import Any

import numpy as np

from streamcap.core.policy import CaptionPolicy
from streamcap.core.policy_window import DecodeRequest, Step

Call = tuple[str, tuple[Any, ...], Any]


# --------------------------------------------------------------------------- answers


def request_key(r: DecodeRequest) -> tuple[Any, ...]:
    """A request as a trace compares it: its fields and a hash of its audio."""
    digest = hashlib.sha1(np.ascontiguousarray(r.audio).tobytes()).hexdigest()
    return (r.id, r.kind, r.window, r.start, r.end, r.words, len(r.audio), digest)


def step_key(step: Step) -> tuple[Any, ...]:
    """A step as a trace compares it: its requests' keys and its captions."""
    return (tuple(request_key(r) for r in step.requests), tuple(step.captions))


def counters(p: CaptionPolicy) -> tuple[Any, ...]:
    """The policy's counters after a call (early finals, drops, committed text, speech)."""
    return (dict(p.early_finals), dict(p.drops), p.committed_text, p.in_speech)


def make_recorder(calls: list[Call]) -> type[CaptionPolicy]:
    """A `CaptionPolicy` that appends (name, arguments, answer) to `calls` for each call."""

    class Recorder(CaptionPolicy):
        def _log(self, name: str, args: tuple[Any, ...], answer: Any) -> None:
            calls.append((name, args, (answer, counters(self))))

        def on_event(self, event: Any, now: float | None = None) -> Step:
            out = super().on_event(event, now)
            self._log("on_event", (event, now), step_key(out))
            return out

        def on_tick(self, stream_time: float, now: float | None = None, early: bool = True) -> Step:
            out = super().on_tick(stream_time, now, early)
            self._log("on_tick", (stream_time, now, early), step_key(out))
            return out

        def on_result(self, request: DecodeRequest, result: Any, now: float) -> Step:
            out = super().on_result(request, result, now)
            self._log("on_result", (request.id, result, now), step_key(out))
            return out

        def finish(self, now: float | None = None) -> Step:
            out = super().finish(now)
            self._log("finish", (now,), step_key(out))
            return out

        def prepare(self, request: DecodeRequest) -> Any:
            out = super().prepare(request)
            self._log("prepare", (request.id,), (out.prompt, out.hypothesis))
            return out

        def take_drops(self) -> Any:
            out = super().take_drops()
            self._log("take_drops", (), tuple(out))
            return out

    return Recorder


def check(trace: dict[str, Any]) -> tuple[int, dict[str, int]]:
    """Replay `trace` on a fresh `CaptionPolicy`: the calls compared, and the answers' items
    (requests, partial and final captions, prepared inputs, dropped finals) by kind."""
    pol = CaptionPolicy(trace["config"])
    emitted: dict[int, DecodeRequest] = {}
    counts = {"requests": 0, "partials": 0, "finals": 0, "prepared": 0, "drops": 0}
    for i, (name, args, expected) in enumerate(trace["calls"]):
        if name == "on_result":
            rid, result, now = args
            out: Any = pol.on_result(emitted[rid], result, now)
        elif name == "prepare":
            inputs = pol.prepare(emitted[args[0]])
            out = (inputs.prompt, inputs.hypothesis)
        elif name == "take_drops":
            out = tuple(pol.take_drops())
        else:
            out = getattr(pol, name)(*args)
        if isinstance(out, Step):
            emitted.update((r.id, r) for r in out.requests)
            counts["requests"] += len(out.requests)
            for c in out.captions:
                counts[c.type + "s"] += 1
            out = step_key(out)
        elif name == "take_drops":
            counts["drops"] += len(out)
        else:
            counts["prepared"] += 1
        got = (out, counters(pol))
        if got != expected:
            raise SystemExit(f"call {i} ({name}{args[:1]}): expected\n{expected}\ngot\n{got}")
    return len(trace["calls"]), counts


def count_transitions() -> collections.Counter[tuple[Any, Any, Any]] | None:
    """Count every (state, event, new state) the checked policy takes (None: a policy
    without `policy_states`, the one before issue 24)."""
    try:
        from streamcap.core.state_machine import StateMachine
    except ImportError:
        return None
    seen: collections.Counter[tuple[Any, Any, Any]] = collections.Counter()
    fire = StateMachine.fire

    def counted(self: Any, event: Any) -> Any:
        before = self.state
        new = fire(self, event)
        seen[(before, event, new)] += 1
        return new

    StateMachine.fire = counted  # type: ignore[method-assign]
    return seen


def report_transitions(seen: collections.Counter[tuple[Any, Any, Any]]) -> None:
    from streamcap.core import policy_states as ps

    for name in ("WINDOW_TRANSITIONS", "PARTIAL_TRANSITIONS", "SPEECH_TRANSITIONS"):
        table = getattr(ps, name)
        for state, row in table.items():
            for event, new in row.items():
                n = seen[(state, event, new)]
                print(f"  {name} {state.name} --{event.name}--> {new.name}: {n}")
