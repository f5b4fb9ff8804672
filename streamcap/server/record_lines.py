"""A line of a recording read back: the wire event it holds, checked like a client's input.

A recording is only as trustworthy as its folder: a hand-edited, foreign or damaged file must
not put into a viewer's events, a subtitle file or a room's numbering anything the server would
not have sent itself. So every field is checked as the protocol checks what a client sends
(red-team round 4, bug 8): JSON without `NaN`/`Infinity`, integers that are integers (not
`true`, `2.5` or `"2"`), seqs a viewer can send back as `since` (and a browser holds exactly),
epochs that `epoch=` accepts, times that are finite, not negative, in order and below
`cues.MAX_TIME_S` (31 years: the latest a subtitle file holds), words likewise, and text
without control or format characters (a bidi override in a recording reversed an overlay's
line). A line that fails is skipped (`BadLine`), with one warning per read (`record.py`);
nothing here touches a file. A `names` line (a rename: `names.py`) is checked as a rename
request is (`parse_names`).
"""

from __future__ import annotations

import json
import math
from typing import Any

from streamcap.core.captions import Caption
from streamcap.core.speaker_names import NamesError, check_map
from streamcap.cues import MAX_TIME_S

from .client_text import check_text, name_rule, parse_speaker, well_formed
from .close import ProtocolError
from .request import EPOCH_RE

#: The largest seq read back: JavaScript's exact integers (a viewer keeps the last seq and sends
#: it back as `since`, which takes up to 18 digits), so numbering can never pass what either holds.
MAX_SEQ = 2**53 - 1
#: The latest time (unix seconds, the year 5138) a `names` line may carry.
MAX_UNIX_TIME = 1e11
#: A recorded line is one final (a Whisper window's text and words: a few KB); a longer one is
#: not ours, and is not even parsed.
MAX_LINE_BYTES = 256 * 1024


class BadLine(ValueError):
    """A recorded line that does not hold a well-formed final (the reason says what)."""


def _constant(token: str) -> Any:
    raise BadLine(f"{token} is not JSON")


def _int(d: dict[str, Any], key: str, low: int, high: int) -> int:
    v = d.get(key)
    if type(v) is not int or not low <= v <= high:  # bool is not an int here
        raise BadLine(f"{key} must be an integer from {low} to {high}")
    return v


def _number(v: Any, what: str, low: float, high: float) -> float:
    if type(v) not in (int, float) or not (math.isfinite(v) and low <= v <= high):
        raise BadLine(f"{what} must be a number from {low:g} to {high:g}")
    return float(v)


def _text(v: Any, what: str) -> str:
    if not isinstance(v, str) or not well_formed(v):
        raise BadLine(f"{what} must be well-formed text")
    if not v.isprintable():  # the common case costs one C call; the rest as a client's text
        try:
            check_text(v, what, spaces=True)
        except ProtocolError as e:
            raise BadLine(e.reason) from None
    return v


def _check_words(items: Any) -> None:
    if not isinstance(items, list):
        raise BadLine("words must be a list")
    for w in items:
        if not isinstance(w, dict):
            raise BadLine("a word must be an object")
        _text(w.get("word"), "a word")
        w0 = _number(w.get("start"), "a word's start", 0.0, MAX_TIME_S)
        w1 = _number(w.get("end"), "a word's end", w0, MAX_TIME_S)
        _number(w.get("probability"), "a word's probability", 0.0, 1.0)
        if w1 < w0:
            raise BadLine("a word ends before it starts")


def parse_line(line: bytes | str) -> Caption | None:
    """The final a recorded line holds; None for a partial (recordings hold finals only, and
    a partial line is ignored, not broken). `BadLine` if it is not what the server writes."""
    if len(line) > MAX_LINE_BYTES:
        raise BadLine(f"line longer than {MAX_LINE_BYTES} bytes")
    try:
        d = json.loads(line, parse_constant=_constant)
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError, too many digits
        raise BadLine(f"not JSON: {e}") from None
    if not isinstance(d, dict):
        raise BadLine("not a JSON object")
    kind = d.get("type")
    if kind in ("partial", "names"):  # no final: a rename is read by `parse_names`
        return None
    if kind != "final":
        raise BadLine("type must be 'final'")
    _int(d, "seq", 1, MAX_SEQ)
    _int(d, "segment", 0, MAX_SEQ)
    _int(d, "committed_chars", 0, MAX_SEQ)
    start = _number(d.get("start"), "start", 0.0, MAX_TIME_S)
    _number(d.get("end"), "end", start, MAX_TIME_S)
    _number(d.get("latency_ms"), "latency_ms", -MAX_TIME_S, MAX_TIME_S)
    _text(d.get("stream"), "stream")
    _text(d.get("text"), "text")
    epoch = d.get("epoch", "")
    if not isinstance(epoch, str) or (epoch and not EPOCH_RE.fullmatch(epoch)):
        raise BadLine("epoch must be one as caption events carry it")
    _check_words(d.get("words", []))
    speaker = d.get("speaker", "")
    if not isinstance(speaker, str):
        raise BadLine("speaker must be text")
    if speaker:
        try:
            if parse_speaker(speaker) != speaker:
                raise BadLine("speaker name not in its normal form")
        except ProtocolError as e:
            raise BadLine(e.reason) from None
    try:
        return Caption.from_dict(d)
    except ValueError as e:
        raise BadLine(str(e)) from None


def parse_names(line: bytes | str) -> dict[str, str] | None:
    """The names map a recorded `names` line sets (``{"type": "names", "names": {...}, "at":
    T}``, written at each rename: the whole map); None for any other line. `BadLine` if it is
    not one the server writes: labels and names as a rename takes them, a finite time."""
    if len(line) > MAX_LINE_BYTES:
        raise BadLine(f"line longer than {MAX_LINE_BYTES} bytes")
    try:
        d = json.loads(line, parse_constant=_constant)
    except ValueError as e:
        raise BadLine(f"not JSON: {e}") from None
    if not isinstance(d, dict) or d.get("type") != "names":
        return None
    _number(d.get("at"), "at", 0.0, MAX_UNIX_TIME)
    try:
        return check_map(d.get("names"), name_rule)
    except NamesError as e:
        raise BadLine(str(e)) from None
