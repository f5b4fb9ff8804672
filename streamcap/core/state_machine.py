"""A state machine held to its table, as h11's `_state.py` holds a connection's.

Its own module because more than one machine of the core uses it: the caption policy's three
(`core.policy_states`) and the segmenter's (`core.segmenter_states`). A table maps each state to
the events it allows and the state each leads to; `StateMachine.fire` is the only way to change
the state, and an event the table does not hold raises `TransitionError`, so that a rule broken
shows where it breaks, not as a caption lost later.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Generic, TypeVar


class TransitionError(RuntimeError):
    """An event that the machine's table does not allow in its current state."""


S = TypeVar("S", bound=enum.Enum)
E = TypeVar("E", bound=enum.Enum)


class StateMachine(Generic[S, E]):
    """One machine: its table and its current state; `fire` is the only way to change it."""

    __slots__ = ("_state", "_table")

    def __init__(self, table: Mapping[S, Mapping[E, S]], initial: S) -> None:
        self._table = table
        self._state = initial

    @property
    def state(self) -> S:
        return self._state

    def fire(self, event: E) -> S:
        """Take `event`: the new state, or `TransitionError` if the table does not allow it."""
        try:
            new = self._table[self._state][event]
        except KeyError:
            raise TransitionError(
                f"{event.name} is not allowed in state {self._state.name}"
            ) from None
        self._state = new
        return new

    def __repr__(self) -> str:
        return f"<StateMachine {self._state.name}>"
