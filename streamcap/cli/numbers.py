"""The one argparse type of every numeric flag (and config key): `Number`, and the kinds the
commands share. Importing this module is cheap (the parser is built from it for ``--help``).
"""

from __future__ import annotations

import argparse


class Number:
    """The one argparse type of every numeric flag (and config key): a whole number or a
    float, in range, and never NaN; infinity only where `infinite` says it has a meaning.

    Why one type: a plain ``float`` flag took ``-5`` and ``nan``, and code that read "not
    above 0" as "off" switched a flood guard off without a word (red team 2026-12-05, bug 11).
    ``low``/``high`` are inclusive bounds, ``above`` an exclusive one; ``note`` ends the
    message ("0 = no limit")."""

    def __init__(
        self, kind: type[int] | type[float] = float, *, low: float | None = None,
        above: float | None = None, high: float | None = None, infinite: bool = False,
        note: str = "",
    ) -> None:  # fmt: skip
        self.kind = kind
        self.low, self.above, self.high = low, above, high
        self.infinite = infinite
        self.note = note

    def __repr__(self) -> str:  # argparse names the type in some messages
        return "a whole number" if self.kind is int else "a number"

    def __call__(self, value: str) -> int | float:
        x: int | float
        try:
            x = int(value) if self.kind is int else float(value)
        except (TypeError, ValueError):
            what = "a whole number" if self.kind is int else "a number"
            raise argparse.ArgumentTypeError(f"{value!r} is not {what}") from None
        if x != x:
            raise argparse.ArgumentTypeError(f"{value} is not a number (NaN)")
        if not self.infinite and x in (float("inf"), float("-inf")):
            raise argparse.ArgumentTypeError(f"{value} is not a finite number")
        if (
            (self.low is not None and x < self.low)
            or (self.above is not None and not x > self.above)
            or (self.high is not None and x > self.high)
        ):
            raise argparse.ArgumentTypeError(f"{value} {self.rule()}")
        return x

    def rule(self) -> str:
        """What the flag takes, as the end of an error message."""
        note = f" ({self.note})" if self.note else ""
        low, high = self.low, self.high
        if self.above is not None:
            base = "must be positive" if self.above == 0 else f"must be more than {self.above:g}"
            if high is not None:
                base += f" and at most {high:g}"
        elif low is not None and high is not None:
            base = f"must be {low:g}-{high:g}"
        elif low is not None:
            base = "must not be negative" if low == 0 else f"must be at least {low:g}"
        elif high is not None:
            base = f"must be at most {high:g}"
        else:
            base = "is out of range"
        return base + note


#: A count: 1 or more.
positive_int = Number(int, low=1)
#: A duration, rate or size that must be there: more than 0.
positive_float = Number(float, above=0)
#: A limit where 0 switches it off (the flag's help says "0 = ...").
off_or_positive = Number(float, low=0)
#: The hallucination guard's thresholds: any number; -inf / inf switch a test off.
threshold = Number(float, infinite=True)
