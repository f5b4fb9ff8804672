"""Meeting minutes (``.md``): a heading, the participants, then one paragraph per turn.

Subtitles are cut for a screen (cues of two lines); people who read a meeting afterwards want
turns: who spoke, when, and what they said, as one paragraph (issue 37, item 3). Consecutive
finals of one speaker are one turn, written ``**Ana** (00:03:12): ...`` with the time its
first final starts. Speech nobody is named for (one microphone without voice labels) has no
turns; its paragraphs break where the speaker paused for `PARAGRAPH_PAUSE_S` instead, each
led by its time. The participants are the names in the order they first speak.

Turns are grouped by the speaker a caption carries: a renamed speaker
(`core.speaker_names.renamed`, applied before the finals come here) groups by the name shown,
so two labels given one name read as one person.

Caption text and names are model output or whatever a participant typed: Markdown's inline
syntax in them is escaped (``*``, ``_``, ``[``, ``<``, ``&``, ...), so a transcript renders
as what was said, never as links, emphasis or HTML. Pure, apart from `MinutesWriter`, which
keeps a file valid after every final.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import date as _date
from typing import TextIO

from streamcap.core.captions import Caption
from streamcap.cues import ms
from streamcap.formats.base import CaptionWriter, Decoded, in_time_order

__all__ = [
    "PARAGRAPH_PAUSE_S",
    "Minutes",
    "MinutesWriter",
    "clock_time",
    "md_escape",
    "render_minutes",
]

#: Unnamed speech starts a new paragraph after a pause this long (seconds): without names
#: there are no turns, and an hour of one voice must not be one paragraph.
PARAGRAPH_PAUSE_S = 4.0

#: Markdown's inline syntax (CommonMark escapes any ASCII punctuation with a backslash).
_INLINE = re.compile(r"([\\`*_\[\]<>&~])")
#: What would start a block (heading, list, quote, rule) at the start of a list item's text.
_BLOCK_START = re.compile(r"^(?:[#+\-=|]|\d+(?=[.)]))")


def md_escape(text: str) -> str:
    """`text` as Markdown shows it literally, on one line (whitespace runs become a space)."""
    return _INLINE.sub(r"\\\1", " ".join(text.split()))


def _escape_item(text: str) -> str:
    """A name as a list item's text: also nothing that starts a block (``- # x``)."""
    text = md_escape(text)
    m = _BLOCK_START.match(text)
    if m is None:
        return text
    if m.group(0).isdigit():  # "1." would be a nested ordered list
        return text[: m.end()] + "\\" + text[m.end() :]
    return "\\" + text


def clock_time(seconds: float) -> str:
    """``HH:MM:SS`` of a stream time (whole seconds, truncated; a broken time clamps as the
    subtitle writers clamp it)."""
    s = ms(seconds) // 1000
    return f"{s // 3600:02d}:{s // 60 % 60:02d}:{s % 60:02d}"


@dataclass
class Turn:
    """One speaker's consecutive finals (or, unnamed, one paragraph of speech)."""

    speaker: str  # the name shown ("" when nobody is named)
    start: float
    end: float
    texts: list[str] = field(default_factory=list)

    def paragraph(self) -> str:
        text = md_escape(" ".join(self.texts))
        when = clock_time(self.start)
        if self.speaker:
            return f"**{md_escape(self.speaker)}** ({when}): {text}"
        return f"({when}) {text}"


class Minutes:
    """The minutes of the finals added so far, in the order added (`render`). `add` says what
    changed, so a writer rewrites only that: the last turn grew (``"more"``), a turn began
    (``"turn"``), or one began with someone new, which changes the participants at the top
    (``"participant"``); ``""`` when the caption adds nothing (a partial, an empty final)."""

    def __init__(self, title: str = "", date: str = "") -> None:
        self.title = title
        self.date = date
        self.turns: list[Turn] = []
        self.participants: list[str] = []

    def add(self, caption: Caption) -> str:
        text = " ".join(caption.text.split())
        if caption.type != "final" or not text:
            return ""
        who = caption.speaker
        last = self.turns[-1] if self.turns else None
        if last is not None and last.speaker == who:
            pause = caption.start - last.end
            if who or pause < PARAGRAPH_PAUSE_S:
                last.texts.append(text)
                last.end = max(last.end, caption.end)
                return "more"
        self.turns.append(Turn(who, caption.start, caption.end, [text]))
        if who and who not in self.participants:
            self.participants.append(who)
            return "participant"
        return "turn"

    def header(self) -> str:
        """The heading, the date and the participants: everything before the first turn."""
        lines = [f"# Minutes: {md_escape(self.title) or 'transcript'}", ""]
        if self.date:
            lines += [f"Date: {md_escape(self.date)}", ""]
        if self.participants:
            lines += ["## Participants", "", *(f"- {_escape_item(p)}" for p in self.participants)]
            lines.append("")
        lines.append("## Transcript")
        return "\n".join(lines) + "\n"

    @staticmethod
    def block(turn: Turn) -> str:
        """A turn as the file holds it: a blank line, then its paragraph."""
        return f"\n{turn.paragraph()}\n"

    def render(self) -> str:
        return self.header() + "".join(self.block(t) for t in self.turns)


def render_minutes(captions: Iterable[Caption], *, title: str = "", date: str = "") -> str:
    """The whole minutes of the finals among `captions`, in order of their start (a room's
    finals arrive in the order speech ended)."""
    minutes = Minutes(title, date)
    for c in in_time_order(captions):
        minutes.add(c)
    return minutes.render()


class MinutesWriter(CaptionWriter):
    """``.md`` minutes written as finals come, valid after each: a final that continues the
    last turn rewrites that turn's paragraph, a new turn is appended, and a new participant
    (the list at the top) rewrites the file. A target that cannot seek (a pipe) gets the
    whole document when it is closed. `title` defaults to the file's name without its suffix,
    `date` to today."""

    def __init__(
        self, target: TextIO | str | os.PathLike[str], *, title: str = "", date: str = ""
    ) -> None:
        if not title and isinstance(target, (str, os.PathLike)):
            title = os.path.splitext(os.path.basename(os.fspath(target)))[0]
        self.minutes = Minutes(title, date or _date.today().isoformat())
        super().__init__(target)

    def _begin(self) -> None:
        try:
            self._seekable = self._file.seekable()
        except (AttributeError, ValueError, OSError):
            self._seekable = False
        self._open_at: int | None = None  # where the last turn's block starts (a tell())
        if self._seekable:
            self._file.write(self.minutes.header())
            self._file.flush()

    def _format(self, caption: Caption, decoded: Decoded | None) -> str:
        change = self.minutes.add(caption)
        if not change or not self._seekable:
            return ""
        f = self._file
        if change == "participant":  # the list at the top changed: everything again
            f.seek(0)
            f.truncate()
            f.write(self.minutes.header())
            f.write("".join(self.minutes.block(t) for t in self.minutes.turns[:-1]))
        elif change == "more" and self._open_at is not None:
            f.seek(self._open_at)
            f.truncate()
        self._open_at = f.tell()
        return self.minutes.block(self.minutes.turns[-1])

    def close(self) -> None:
        if not self._closed and not self._seekable:
            self._file.write(self.minutes.render())
            self._file.flush()
        super().close()
