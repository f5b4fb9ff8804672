"""SRT and WebVTT: a final's cues by the cue policy (`streamcap.cues`: line width and count,
cuts at sentence ends, timed by the words), each written by its library (`srt`, `webvtt-py`).
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable, Iterable
from datetime import timedelta
from typing import TextIO

import srt  # type: ignore[import-untyped]  # the library ships no type hints
import webvtt

from streamcap.core.captions import Caption
from streamcap.cues import (
    DEFAULT_CUES,
    Cue,
    CueStyle,
    as_is,
    highlighted_cues,
    ms,
    plan_cues,
    vtt_escape,
)
from streamcap.formats.base import CaptionWriter, Decoded, format_vtt_time, in_time_order

__all__ = ["SrtWriter", "SubtitleWriter", "VttWriter", "render_srt", "render_vtt"]


class SubtitleWriter(CaptionWriter):
    """SRT and WebVTT: a final's cues by the `CueStyle`, each written by its library."""

    escape: Callable[[str], str] = staticmethod(as_is)

    def __init__(
        self, target: TextIO | str | os.PathLike[str], style: CueStyle = DEFAULT_CUES
    ) -> None:
        self.style = style
        super().__init__(target)

    def cues(self, caption: Caption) -> list[tuple[list[Cue], str]]:
        """The caption's cues (several per policy cue with highlighting) and its speaker."""
        s = self.style
        c = caption
        planned = plan_cues(c.text, c.start, c.end, s.width, s.lines, c.words, s.words)
        if s.highlight:
            return [(highlighted_cues(p, c.words, self.escape), c.speaker) for p in planned]
        return [([(t0, t1, [self.escape(x) for x in lines])], c.speaker)
                for t0, t1, lines, _ in planned]  # fmt: skip

    def _cue(self, cues: list[Cue], speaker: str) -> str:
        raise NotImplementedError

    def _format(self, caption: Caption, decoded: Decoded | None) -> str:
        return "".join(self._cue(c, speaker) for c, speaker in self.cues(caption))


class SrtWriter(SubtitleWriter):
    """SubRip (the `srt` library): numbered cues; "Name: " leads a cue when the caption says
    who spoke and the speaker is not the previous cue's (a continuation cue of the same speaker
    goes without it; with highlighting, every word's cue of a named cue is named)."""

    def __init__(
        self, target: TextIO | str | os.PathLike[str], style: CueStyle = DEFAULT_CUES
    ) -> None:
        self._index = 0
        self._speaker = ""  # whose words the previous cue was
        super().__init__(target, style)

    def _cue(self, cues: list[Cue], speaker: str) -> str:
        name = f"{speaker}: " if speaker and speaker != self._speaker else ""  # no voice markup
        self._speaker = speaker
        out = []
        for t0, t1, lines in cues:
            self._index += 1
            start, end = (timedelta(milliseconds=ms(t)) for t in (t0, t1))
            out.append(srt.Subtitle(self._index, start, end, name + "\n".join(lines)).to_srt())
        return "".join(out)


class VttWriter(SubtitleWriter):
    """WebVTT (`webvtt-py`): text escaped for cue payloads, a ``<v Name>`` voice span on every
    cue of a caption that says who spoke (a voice span belongs to its cue: players show or
    style the name per cue, so it is not left off on continuation cues)."""

    escape = staticmethod(vtt_escape)

    def _begin(self) -> None:
        self._file.write("WEBVTT\n\n")
        self._file.flush()

    def _cue(self, cues: list[Cue], speaker: str) -> str:
        voice = f"<v {vtt_escape(speaker)}>" if speaker else ""
        doc = webvtt.WebVTT(captions=[
            webvtt.Caption(format_vtt_time(t0), format_vtt_time(t1), [voice + lines[0], *lines[1:]])
            for t0, t1, lines in cues
        ])  # fmt: skip
        return doc.content.removeprefix("WEBVTT\n\n") + "\n"


def _render_cues(writer: SubtitleWriter, captions: Iterable[Caption]) -> str:
    """Every cue of the finals among `captions`, sorted by start time (stable), with its
    speaker: cues of overlapping finals interleave by when they were said."""
    cues = [cue for c in in_time_order(captions) for cue in writer.cues(c)]
    # by the start as written (whole milliseconds): a cue a rule moved by a fraction of one
    # (a zero-length one given its millisecond) keeps its place among cues written alike
    for cue in sorted(cues, key=lambda cue: round(cue[0][0][0] * 1000)):
        writer._file.write(writer._cue(*cue))
    return writer._file.getvalue()  # type: ignore[attr-defined]


def render_srt(captions: Iterable[Caption]) -> str:
    """Whole SRT document for the finals among `captions`, cues in time order."""
    return _render_cues(SrtWriter(io.StringIO()), captions)


def render_vtt(captions: Iterable[Caption]) -> str:
    """Whole WebVTT document for the finals among `captions`, cues in time order."""
    return _render_cues(VttWriter(io.StringIO()), captions)
