"""A stream's subtitle file (or plain transcript, or minutes) kept as it grows: new finals'
cues appended to what was made.

A live stream's `/streams/ID.srt` changes with every final; rendering the whole file again
for each (10 000 finals, older ones read back from the recording) let one looping downloader
take the CPU from the captions (red-team round 4, bug 2). Finals are never revised, so the file
of finals 1..n is the file of finals 1..n-1 with the last one's cues after it, exactly as
`formats.render_srt` / `render_vtt` would write the whole, as long as its cues come after
every cue already written (the whole file is in time order). A stream's finals follow each
other in time; a room's speakers may overlap, and then the whole file is rendered again.
The plain transcript (`.txt`) appends its lines the same way; the minutes (`.md`) keep their
turns (`formats.minutes.Minutes`) and are written out again from them (a new participant
changes the list at the top), which costs a join, not a read of the recording.
Pure (no I/O); one call at a time per document, in a worker thread (`subtitles.py`).
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence

from streamcap.core.captions import Caption
from streamcap.formats.base import CaptionWriter
from streamcap.formats.minutes import Minutes, render_minutes
from streamcap.formats.subtitles import SrtWriter, VttWriter, render_srt, render_vtt
from streamcap.formats.text import TxtWriter, render_txt

#: The appending writer of each kind but the minutes (`Minutes` keeps those).
_WRITERS: dict[str, type[CaptionWriter]] = {"srt": SrtWriter, "vtt": VttWriter, "txt": TxtWriter}


def _in_time_order(finals: Sequence[Caption]) -> list[Caption]:
    """The finals worth writing, by start time, equal starts in seq order: the order the
    writers' `render_*` put them in."""
    return sorted(
        (c for c in finals if c.type == "final" and c.text.strip()), key=lambda c: c.start
    )


class SubtitleDoc:
    """The SRT, WebVTT, TXT or Markdown minutes (`kind`) file of one log's (`epoch`) finals
    through seq `through`; `title` and `date` head the minutes."""

    def __init__(self, kind: str, epoch: str, *, title: str = "", date: str = "") -> None:
        self.kind = kind
        self.epoch = epoch
        self.title = title
        self.date = date
        self.through = 0
        self._buf = io.StringIO()
        self._minutes = Minutes(title, date) if kind == "md" else None
        self._writer = _WRITERS[kind](self._buf) if kind != "md" else None
        self.body = self._taken()
        #: the latest end among the finals written: a final that starts before it would have
        #: cues among theirs, so it cannot be appended
        self._end = -math.inf
        #: False once the whole had to be rendered at once (its writer's state is not kept)
        self.appendable = True

    def _taken(self) -> bytes:
        if self._minutes is not None:  # the whole minutes, from their turns
            return self._minutes.render().encode("utf-8", "replace")
        text = self._buf.getvalue()
        self._buf.seek(0)
        self._buf.truncate()
        return text.encode("utf-8", "replace")  # text that is not well-formed costs a character

    @classmethod
    def render(
        cls, kind: str, epoch: str, finals: Sequence[Caption], *, title: str = "", date: str = ""
    ) -> SubtitleDoc:
        """The whole file of `finals` (seq order)."""
        doc = cls(kind, epoch, title=title, date=date)
        if not doc.extend(finals):
            doc.appendable = False
            if kind == "md":
                whole = render_minutes(finals, title=title, date=date)
            else:
                whole = {"srt": render_srt, "vtt": render_vtt, "txt": render_txt}[kind](finals)
            doc.body = whole.encode("utf-8", "replace")
            doc.through = max((c.seq for c in finals), default=0)
        return doc

    def extend(self, finals: Sequence[Caption]) -> bool:
        """Append `finals` (seqs above `through`, in seq order); False (nothing changed) if
        one of them starts before a final already written ends."""
        if not self.appendable:
            return False
        new = _in_time_order(finals)
        end = self._end
        for c in new:
            if c.start < end or (c.end - c.start) * 1000 < len(c.text.split()) + 1:
                # (a final too short for a millisecond per cue: the cue rules stretch its cues
                # past its end, where the next final's may start; the whole render orders them)
                return False
            end = max(end, c.start, c.end)
        for c in new:
            if self._minutes is not None:
                self._minutes.add(c)
            else:
                assert self._writer is not None
                self._writer.write(c)
        self._end = end
        if self._minutes is not None:
            self.body = self._taken()
        else:
            self.body += self._taken()
        self.through = max([self.through, *(c.seq for c in finals)])
        return True
