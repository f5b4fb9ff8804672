"""The caption file formats, by name: the output-format port and its registry.

A format is a name (the file suffix without its dot), a function that opens its writer on a
file (`WriterFactory`: the target and the `WriterOptions` the command gives every writer), and
two facts the command line needs: whether captions can be written to it as they come (`live`:
openai-whisper's JSON also needs each final's decode, so offline transcription only) and
whether the cue policy applies (`cues`: SRT, WebVTT). A new format is a writer module and one
`register_format` call (in this file's table for a format of streamcap's own); the command
line's `--format` choices, `-o` suffixes and messages come from here.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from streamcap.cues import DEFAULT_CUES, CueStyle
from streamcap.formats.base import CaptionWriter
from streamcap.formats.jsonl import TranscriptJsonlWriter
from streamcap.formats.minutes import MinutesWriter
from streamcap.formats.subtitles import SrtWriter, VttWriter
from streamcap.formats.text import TxtWriter
from streamcap.formats.tsv import TsvWriter
from streamcap.formats.whisper_json import WhisperJsonWriter

__all__ = [
    "FileFormat",
    "WriterFactory",
    "WriterOptions",
    "cue_formats",
    "file_formats",
    "format_of",
    "live_formats",
    "open_format",
    "open_writer",
    "register_format",
]

Target = TextIO | str | os.PathLike[str]


@dataclass(frozen=True)
class WriterOptions:
    """What a command asks of every writer; each format takes what applies to it."""

    include_partials: bool = False  # .jsonl: partials too
    style: CueStyle = DEFAULT_CUES  # .srt / .vtt: line width and count, highlighting
    title: str = ""  # .md: the heading (default: the file's name without its suffix)
    date: str = ""  # .md: the date under it (default: today)


#: Opens a format's writer on a file (a path it creates, or an open text file).
WriterFactory = Callable[[Target, WriterOptions], CaptionWriter]


@dataclass(frozen=True)
class FileFormat:
    name: str
    open: WriterFactory
    live: bool = True  # written as captions come (else: needs each final's decode)
    cues: bool = False  # the cue policy (`CueStyle`) applies


_REGISTRY: dict[str, FileFormat] = {}


def register_format(
    name: str, open_: WriterFactory, *, live: bool = True, cues: bool = False
) -> None:
    """Make ``name`` a caption file format (a later registration replaces an earlier)."""
    _REGISTRY[name.lower()] = FileFormat(name.lower(), open_, live, cues)


register_format("srt", lambda t, o: SrtWriter(t, o.style), cues=True)
register_format("vtt", lambda t, o: VttWriter(t, o.style), cues=True)
register_format("jsonl", lambda t, o: TranscriptJsonlWriter(t, include_partials=o.include_partials))
register_format("txt", lambda t, o: TxtWriter(t))
register_format("json", lambda t, o: WhisperJsonWriter(t), live=False)
register_format("md", lambda t, o: MinutesWriter(t, title=o.title, date=o.date))
register_format("tsv", lambda t, o: TsvWriter(t))


def file_formats() -> tuple[str, ...]:
    """Every caption file format, by name."""
    return tuple(_REGISTRY)


def live_formats() -> tuple[str, ...]:
    """The formats a stream of captions can be written to as it goes."""
    return tuple(f.name for f in _REGISTRY.values() if f.live)


def cue_formats() -> tuple[str, ...]:
    """The formats the cue policy (`CueStyle`) applies to."""
    return tuple(f.name for f in _REGISTRY.values() if f.cues)


def format_of(path: str | os.PathLike[str]) -> str | None:
    """The format a file name asks for (by suffix, any case), or None if it names none."""
    name = Path(path).suffix.lower().lstrip(".")
    return name if name in _REGISTRY else None


def open_format(name: str, target: Target, options: WriterOptions | None = None) -> CaptionWriter:
    """The writer of format `name` on `target` (a path, or an open text file: a whole document
    made in memory); ValueError for a name that is no format."""
    fmt = _REGISTRY.get(name.lower())
    if fmt is None:
        raise ValueError(f"unknown caption format {name!r}: use {', '.join(_REGISTRY)}")
    return fmt.open(target, options or WriterOptions())


def open_writer(
    path: str | os.PathLike[str],
    *,
    include_partials: bool = False,
    style: CueStyle = DEFAULT_CUES,
    title: str = "",
    date: str = "",
) -> CaptionWriter:
    """Writer chosen by the file suffix; `include_partials` applies to .jsonl only, `style` to
    the formats the cue policy applies to, `title` and `date` to .md minutes."""
    fmt = format_of(path)
    if fmt is None:
        suffix = Path(path).suffix.lower()
        raise ValueError(
            f"unsupported caption file type {suffix or '(no suffix)'!r} for {os.fspath(path)!r}: "
            f"use {', '.join('.' + f for f in _REGISTRY)}"
        )
    return _REGISTRY[fmt].open(path, WriterOptions(include_partials, style, title, date))
