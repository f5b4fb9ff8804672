"""The caption policy's state machines, driven through their tables (`core.policy_states`).

Every allowed transition is taken from a machine put in its state, every other (state, event)
pair is refused with `TransitionError` and leaves the state as it was; then the policy itself
is walked through a window's life on synthetic segmenter events, and made to refuse events
that break the segmenter's contract.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from streamcap.core.decode_types import DecodeResult, WordTiming
from streamcap.core.policy import CaptionPolicy
from streamcap.core.policy_config import PolicyConfig
from streamcap.core.policy_states import (
    PARTIAL_TRANSITIONS,
    SPEECH_TRANSITIONS,
    WINDOW_TRANSITIONS,
    PartialEvent,
    PartialState,
    SpeechEvent,
    SpeechState,
    WindowEvent,
    WindowState,
    partial_machine,
    speech_machine,
    window_machine,
)
from streamcap.core.segmenter import SpeechAudio, SpeechEnd, SpeechStart
from streamcap.core.state_machine import StateMachine, TransitionError

SR = 16000
W, WE = WindowState, WindowEvent

# (table, its states, its events, the initial state of the machine the policy makes)
TABLES: dict[str, tuple[Mapping[Any, Mapping[Any, Any]], type[enum.Enum], type[enum.Enum], Any]] = {
    "window": (WINDOW_TRANSITIONS, WindowState, WindowEvent, window_machine().state),
    "partial": (PARTIAL_TRANSITIONS, PartialState, PartialEvent, partial_machine().state),
    "speech": (SPEECH_TRANSITIONS, SpeechState, SpeechEvent, speech_machine().state),
}


def _pairs(name: str, allowed: bool) -> list[tuple[str, Any, Any]]:
    table, states, events, _ = TABLES[name]
    return [(name, s, e) for s in states for e in events if (e in table.get(s, {})) == allowed]


ALLOWED = [p for name in TABLES for p in _pairs(name, True)]
REFUSED = [p for name in TABLES for p in _pairs(name, False)]


def _id(p: tuple[str, Any, Any]) -> str:
    return f"{p[0]}-{p[1].name}-{p[2].name}"


@pytest.mark.parametrize("pair", ALLOWED, ids=_id)
def test_every_allowed_transition(pair: tuple[str, Any, Any]) -> None:
    name, state, event = pair
    table = TABLES[name][0]
    m: StateMachine[Any, Any] = StateMachine(table, state)
    assert m.fire(event) is table[state][event]
    assert m.state is table[state][event]


@pytest.mark.parametrize("pair", REFUSED, ids=_id)
def test_every_other_event_is_refused(pair: tuple[str, Any, Any]) -> None:
    name, state, event = pair
    m: StateMachine[Any, Any] = StateMachine(TABLES[name][0], state)
    with pytest.raises(TransitionError, match=f"{event.name} is not allowed in state"):
        m.fire(event)
    assert m.state is state  # a refused event changes nothing


def test_the_tables_are_what_the_module_docstring_draws() -> None:
    assert len(ALLOWED) == 10 + 2 + 5
    assert len(REFUSED) == 5 * 6 - 10 + 2 * 2 - 2 + 2 * 4 - 5
    # a window's life: every state reachable from OPEN, and DONE (the end) from every state
    graph = {s: set(row.values()) for s, row in WINDOW_TRANSITIONS.items()}
    assert _reachable(graph, W.OPEN) == set(WindowState)
    assert all(W.DONE in _reachable(graph, s) for s in WindowState)
    assert WINDOW_TRANSITIONS[W.DONE] == {}  # a window that is done takes nothing
    # an early final is voided back to OPEN, whether its result came or not
    for state in (W.EARLY_FINAL, W.EARLY_FINAL_READY):
        assert WINDOW_TRANSITIONS[state][WE.VOICE] is W.OPEN
        assert WINDOW_TRANSITIONS[state][WE.COMMIT_CUT] is W.OPEN
    # a closed window waits for its final; one whose early final came is done at once
    assert WINDOW_TRANSITIONS[W.EARLY_FINAL][WE.CLOSE] is W.CLOSED
    assert WINDOW_TRANSITIONS[W.EARLY_FINAL_READY][WE.CLOSE] is W.DONE
    # the stream ends in either speech state; audio only comes inside an utterance
    assert all(
        SPEECH_TRANSITIONS[s][SpeechEvent.FINISH] is SpeechState.SILENCE for s in SpeechState
    )
    assert SpeechEvent.AUDIO not in SPEECH_TRANSITIONS[SpeechState.SILENCE]


def _reachable(graph: dict[Any, set[Any]], start: Any) -> set[Any]:
    seen, todo = {start}, [start]
    while todo:
        for nxt in graph[todo.pop()] - seen:
            seen.add(nxt)
            todo.append(nxt)
    return seen


def test_a_window_voided_twice_then_closed_early() -> None:
    m = window_machine()
    path = [WE.EARLY_FINAL, WE.VOICE, WE.EARLY_FINAL, WE.EARLY_RESULT, WE.COMMIT_CUT,
            WE.EARLY_FINAL, WE.EARLY_RESULT, WE.CLOSE]  # fmt: skip
    states = [m.fire(e) for e in path]
    assert states == [W.EARLY_FINAL, W.OPEN, W.EARLY_FINAL, W.EARLY_FINAL_READY, W.OPEN,
                      W.EARLY_FINAL, W.EARLY_FINAL_READY, W.DONE]  # fmt: skip
    with pytest.raises(TransitionError):
        m.fire(WE.FINAL_RESULT)  # its final was the early one: no other comes


# --------------------------------------------------------------------------- the policy


def _audio(start: float, end: float, silent_tail: float = 0.0) -> SpeechAudio:
    n = round((end - start) * SR)
    return SpeechAudio(np.zeros(n, np.float32), start, end, silent_tail)


def _result(text: str) -> DecodeResult:
    return DecodeResult(tuple(range(len(text.split()))), text, "en", 0.01, -0.2, "eot")


def test_the_policy_walks_a_window_through_its_states() -> None:
    pol = CaptionPolicy(PolicyConfig(early_final_s=0.12, pause_final_s=0.3))
    assert not pol.in_speech
    pol.on_event(SpeechStart(0.0))
    assert pol.in_speech
    (partial,) = pol.on_event(_audio(0.0, 1.0)).requests  # OPEN, a partial in flight
    w = pol._window
    assert w is not None and w.state.state is W.OPEN
    assert w.partial.state is PartialState.PENDING
    pol.on_result(partial, _result("hello there"), 1.1)
    assert w.partial.state is PartialState.IDLE
    pol.on_event(_audio(1.0, 1.2, silent_tail=0.2))
    (early,) = pol.on_tick(1.2).requests  # a pause begins: the early final starts
    assert early.kind == "final" and w.state.state is W.EARLY_FINAL
    assert pol.on_event(_audio(1.2, 1.3)).requests == []  # voice: void, no partial yet
    assert w.state.state is W.OPEN and pol.early_finals["voided"] == 1
    assert pol.on_result(early, _result("hello"), 1.35).captions == []  # a void result
    pol.on_event(_audio(1.3, 1.5, silent_tail=0.2))
    (early,) = pol.on_tick(1.5).requests
    pol.on_result(early, _result("hello there friend."), 1.55)
    assert w.state.state is W.EARLY_FINAL_READY  # kept until the pause lasts
    step = pol.on_tick(1.5 + 0.3 + 0.01)  # it did: the early result is the final at once
    assert w.state.state is W.DONE and pol._window is None
    assert [c.text for c in step.captions] == ["Hello there friend."]
    assert pol.early_finals == {"started": 2, "used": 1, "voided": 1}
    pol.on_event(SpeechEnd(0.0, 1.5, "silence"))
    assert not pol.in_speech
    pol.finish()


def test_a_closed_window_waits_for_its_final_and_takes_a_late_partial() -> None:
    pol = CaptionPolicy(PolicyConfig(early_final_s=None))
    pol.on_event(SpeechStart(0.0))
    (partial,) = pol.on_event(_audio(0.0, 1.0)).requests
    w = pol._window
    assert w is not None
    (final,) = pol.on_event(SpeechEnd(0.0, 1.0, "silence")).requests
    assert w.state.state is W.CLOSED and w.partial.state is PartialState.PENDING
    assert pol.on_result(partial, _result("hi"), 1.1).captions == []  # drafts, not shown
    assert w.partial.state is PartialState.IDLE and pol.prepare(final).hypothesis == (0,)
    (cap,) = pol.on_result(final, _result("Hi."), 1.2).captions
    assert cap.type == "final" and cap.text == "Hi." and w.state.state is W.DONE


@pytest.mark.parametrize("early_came", [False, True], ids=["early-final", "early-final-ready"])
def test_a_commit_that_cuts_the_window_voids_its_early_final(early_came: bool) -> None:
    """A partial asked for before a pause answers after the window's early final started, and
    commits a sentence: the window is cut after it, so that early final decoded what is now
    committed (COMMIT_CUT: back to OPEN, counted as voided)."""
    pol = CaptionPolicy(PolicyConfig(early_final_s=0.12, pause_final_s=5.0))
    pol.on_event(SpeechStart(0.0))
    (p1,) = pol.on_event(_audio(0.0, 1.0)).requests
    pol.on_result(p1, _result("Hello there. How are"), 1.05)
    (p2,) = pol.on_event(_audio(1.0, 2.0)).requests
    assert p2.words  # a sentence end is ahead: this partial is aligned, to cut at a commit
    pol.on_event(_audio(2.0, 2.2, silent_tail=0.2))
    (early,) = pol.on_tick(2.2).requests
    w = pol._window
    assert w is not None and w.state.state is W.EARLY_FINAL
    if early_came:
        pol.on_result(early, _result("Hello there. How are you"), 2.25)
        assert w.state.state is W.EARLY_FINAL_READY
    times = [(0.1, 0.4), (0.5, 0.9), (1.2, 1.4), (1.5, 1.7), (1.8, 1.95)]
    text = "Hello there. How are you"
    timed = tuple(
        WordTiming(" " + t, a, b, 0.9) for t, (a, b) in zip(text.split(), times, strict=True)
    )
    step = pol.on_result(p2, replace(_result(text), words=timed), 2.3)
    assert [(c.type, c.text) for c in step.captions][0] == ("final", "Hello there.")
    assert w.state.state is W.OPEN and w.early is None and w.start > 0.9  # cut after "there."
    assert pol.early_finals == {"started": 1, "used": 0, "voided": 1}
    assert pol.on_result(early, _result("late"), 2.4).captions == []  # its result: void
    (final,) = pol.finish(2.5).requests  # the stream ends inside the utterance
    assert final.kind == "final" and not pol.in_speech and w.state.state is W.CLOSED


@pytest.mark.parametrize(
    "events",
    [
        [_audio(0.0, 0.5)],  # audio outside an utterance
        [SpeechStart(0.0), SpeechStart(0.1)],  # an utterance inside another
        [SpeechEnd(0.0, 1.0, "silence")],  # the end of none
    ],
    ids=["audio", "start-twice", "end"],
)
def test_the_policy_refuses_events_that_break_the_segmenter_contract(
    events: list[Any],
) -> None:
    pol = CaptionPolicy()
    *before, last = events
    for ev in before:
        pol.on_event(ev)
    with pytest.raises(TransitionError):
        pol.on_event(last)
