"""Captions made by hand for the tests of the caption log, the cue policy and the writers."""

from __future__ import annotations

from streamcap.core.captions import Caption

LONG = (
    "The quick brown fox jumps over the lazy dog and then keeps on running through the "
    "dark forest until the night finally falls over the quiet hills."
)


def cap(
    type: str = "final",
    text: str = "hello world",
    start: float = 1.0,
    end: float = 2.5,
    seq: int = 1,
    segment: int = 0,
) -> Caption:
    return Caption(type, "s1", seq, segment, text, start, end, len(text), 123.456)  # type: ignore[arg-type]
