"""What every caption file writer shares: the base writer, a final's decode, and file times.

A writer keeps only finals (finals are never revised, so a file can be appended to as they
arrive, and a crash or Ctrl-C leaves a valid file with everything so far); an appending writer
keeps arrival order, and a whole document (`render_*`) sorts by start time (`in_time_order`),
since a room's finals arrive in the order speech ended.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import TextIO

import srt  # type: ignore[import-untyped]  # the library ships no type hints
from webvtt.models import Timestamp

from streamcap.core.captions import Caption
from streamcap.cues import ms

__all__ = [
    "CaptionWriter",
    "Decoded",
    "format_srt_time",
    "format_vtt_time",
    "in_time_order",
    "spoken_span",
]


def format_srt_time(seconds: float) -> str:
    """`00:01:02,345` (negative times clamp to zero)."""
    return srt.timedelta_to_srt_timestamp(timedelta(milliseconds=ms(seconds)))


def format_vtt_time(seconds: float) -> str:
    """`00:01:02.345` (negative times clamp to zero)."""
    return str(Timestamp.from_seconds(ms(seconds) / 1000))


@dataclass(frozen=True)
class Decoded:
    """What openai-whisper's JSON says of a segment beyond its caption: the decode behind it."""

    text: str  # as the tokens spell it (Whisper's leading space kept)
    tokens: tuple[int, ...]
    avg_logprob: float | None
    no_speech_prob: float
    language: str
    seek: int  # the decoded window's first frame (100 per second), as whisper counts it


class CaptionWriter:
    """Base writer: appends each caption as it arrives and flushes, so a crash loses nothing.

    Takes an open text file (not closed by us) or a path (created/truncated, closed by us).
    """

    def __init__(self, target: TextIO | str | os.PathLike[str]) -> None:
        if isinstance(target, (str, os.PathLike)):
            self._file: TextIO = open(target, "w", encoding="utf-8", newline="\n")  # noqa: SIM115
            self._owns = True
        else:
            self._file = target
            self._owns = False
        self._closed = False
        self._begin()

    def _begin(self) -> None:
        """Write any header (VTT)."""

    def _format(self, caption: Caption, decoded: Decoded | None) -> str:
        raise NotImplementedError

    def _wants(self, caption: Caption) -> bool:
        return caption.type == "final" and bool(caption.text.strip())

    def write(self, caption: Caption, decoded: Decoded | None = None) -> None:
        """Append one caption (partials and empty finals are skipped) and flush; `decoded` is
        the decode it came from, where the format has room for it (JSON)."""
        if self._closed:
            raise ValueError("write to a closed caption writer")
        if not self._wants(caption):
            return
        self._file.write(self._format(caption, decoded))
        self._file.flush()

    def write_all(self, captions: Iterable[Caption]) -> None:
        for c in captions:
            self.write(c)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            if self._owns:
                self._file.close()

    def __enter__(self) -> CaptionWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def in_time_order(captions: Iterable[Caption]) -> list[Caption]:
    """The finals worth writing, by start time; equal starts keep their order (stable). A
    room's finals arrive in the order speech *ended*, so a long turn that began first comes
    after a short one said inside it."""
    return sorted(
        (c for c in captions if c.type == "final" and c.text.strip()), key=lambda c: c.start
    )


def spoken_span(caption: Caption) -> tuple[float, float]:
    """From the first word's start to the last word's end, as openai-whisper bounds a segment
    when it times words; the caption's own span (the voice detector's, which may hold seconds
    of silence around the words) when it has no words or their times make no sense."""
    words = caption.words
    if not words:
        return caption.start, caption.end
    start = max(words[0].start, caption.start)
    end = min(words[-1].end, caption.end)
    if not (caption.start <= start <= end <= caption.end):  # NaN fails every comparison
        return caption.start, caption.end
    return start, end
