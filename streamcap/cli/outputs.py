"""``-o/--output``, ``-f/--format`` and the cue flags: which caption files each input writes,
and how, checked up front.

``-o`` takes file names (the suffix picks the format: ``-o a.srt -o a.vtt``) or a folder that
gets ``<input stem>.<format>`` for each ``--format`` (openai-whisper's layout). Every target is
planned and checked before the model loads, so a typo in a path costs a second, not a model
load; nothing is created or truncated until the run starts (a failed start leaves existing
files alone), except a missing output folder, made at once as openai-whisper does.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from streamcap.cli.common import UsageError, say
from streamcap.cli.numbers import positive_int
from streamcap.core.safe_text import printable
from streamcap.cues import DEFAULT_CUES, CueStyle
from streamcap.errors import UserError
from streamcap.formats.base import CaptionWriter, Decoded
from streamcap.formats.registry import (
    cue_formats,
    file_formats,
    format_of,
    live_formats,
    open_writer,
)

if TYPE_CHECKING:
    from streamcap.core.captions import Caption


@dataclass(frozen=True)
class OutputOptions:
    """``-o/--output`` and ``-f/--format``: the caption files to write (`plan_outputs` checks
    and names them)."""

    outputs: tuple[str, ...] = ()
    formats: str | None = None  # -f LIST: the formats written into -o folders (None: all)

    @classmethod
    def from_args(cls, args: argparse.Namespace, *, folders: bool = True) -> OutputOptions:
        """The flags of ``add_output_flags(folders=...)`` (without folders: no -f)."""
        return cls(tuple(args.output), args.format if folders else None)


@dataclass(frozen=True)
class CueOptions:
    """openai-whisper's subtitle flags as given (None, False: not given, `CueStyle`'s
    default): a flag given where no output would use it is refused (`cue_style_of`)."""

    max_line_width: int | None = None
    max_line_count: int | None = None
    highlight_words: bool = False
    max_words_per_line: int | None = None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> CueOptions:
        return cls(
            args.max_line_width, args.max_line_count, args.highlight_words, args.max_words_per_line
        )

    def given(self) -> list[str]:
        """The flags given, as written on the command line."""
        flags = (
            ("--max-line-width", self.max_line_width is not None),
            ("--max-line-count", self.max_line_count is not None),
            ("--highlight-words", self.highlight_words),
            ("--max-words-per-line", self.max_words_per_line is not None),
        )
        return [flag for flag, given in flags if given]

    def style(self) -> CueStyle:
        d = DEFAULT_CUES
        return CueStyle(
            width=self.max_line_width or d.width,
            lines=self.max_line_count or d.lines,
            highlight=self.highlight_words,
            words=self.max_words_per_line,
        )


def _suffixes(formats: Sequence[str]) -> str:
    *rest, last = (f".{f}" for f in formats)
    return f"{', '.join(rest)} or {last}"


def add_output_flags(
    p: argparse.ArgumentParser, *, folders: bool = True, formats: Sequence[str] | None = None
) -> None:
    """-o/--output (and -f/--format where outputs can be folders: one file per input);
    `formats` are those the command can write (None: every format written as captions come,
    `live_formats`)."""
    formats = live_formats() if formats is None else formats
    kinds = _suffixes(formats)
    where = (
        f"a file, its format by suffix ({kinds}), or a folder that gets "
        "<input name>.<format> for each --format"
        if folders
        else f"a file, its format by suffix ({kinds})"
    )
    p.add_argument(
        "-o",
        "--output",
        action="append",
        default=[],
        metavar="PATH" if folders else "FILE",
        help=f"write the finals as they come to {where} (repeatable; default: the terminal only)",
    )
    if folders:
        p.add_argument(
            "-f",
            "--format",
            metavar="LIST",
            help="formats written into an -o folder, comma-separated from "
            f"{','.join(formats)} or all (default: all; without -o: into the current folder; "
            "json is openai-whisper's)",
        )


def add_cue_flags(p: argparse.ArgumentParser) -> None:
    """openai-whisper's subtitle flags, with its names and meaning (`cues.CueStyle`)."""
    g = p.add_argument_group("subtitle cues (.srt, .vtt)")
    g.add_argument(
        "--max-line-width",
        type=positive_int,
        metavar="N",
        help=f"the most characters in a line before it breaks (default: {DEFAULT_CUES.width})",
    )
    g.add_argument(
        "--max-line-count",
        type=positive_int,
        metavar="N",
        help=f"the most lines in a cue before a new cue starts (default: {DEFAULT_CUES.lines})",
    )
    g.add_argument(
        "--max-words-per-line",
        type=positive_int,
        metavar="N",
        help="the most words in a line (default: as many as fit the width)",
    )
    g.add_argument(
        "--highlight-words",
        action="store_true",
        help="underline each word as it is spoken (a cue per word, as openai-whisper writes "
        "them; needs word timestamps)",
    )


def cue_style_of(cues: CueOptions, plan: Sequence[Sequence[Path]]) -> CueStyle:
    """The `CueStyle` the flags ask for; UsageError if no output would use it."""
    given = cues.given()
    if given and not any(format_of(t) in cue_formats() for ts in plan for t in ts):
        raise UsageError(f"{', '.join(given)}: only for .srt or .vtt outputs (-o a.srt)")
    return cues.style()


def _formats(value: str, available: Sequence[str]) -> tuple[str, ...]:
    names = [x.strip().lower().lstrip(".") for x in value.split(",") if x.strip()]
    if names == ["all"]:
        return tuple(available)
    unknown = [x for x in names if x not in file_formats()]
    if unknown or not names:
        raise UsageError(
            f"--format: unknown format {', '.join(unknown) or value!r} "
            f"(use {', '.join(available)} or all)"
        )
    refused = [x for x in names if x not in available]
    if refused:
        raise UsageError(f"--format {', '.join(refused)}: {_NOT_STREAMED}")
    return tuple(dict.fromkeys(names))


#: Why whisper's JSON is refused where captions come as a stream (live, dictation).
_NOT_STREAMED = (
    "openai-whisper's JSON holds each final's decode (avg_logprob, no_speech_prob, tokens), "
    "which only offline transcription has (not --live)"
)


def _is_folder(out: str) -> bool:
    """An existing folder, a name ending in a slash, or a name with no suffix at all."""
    p = Path(out)
    return p.is_dir() or out.endswith(("/", os.sep)) or not p.suffix


def plan_outputs(
    inputs: Sequence[str],
    outputs: Sequence[str],
    formats: str | None,
    *,
    folders: bool = True,
    available: Sequence[str] | None = None,
) -> list[list[Path]]:
    """The caption files of each input, in input order; UsageError / UserError if they cannot
    be written (unknown suffix, a format the command cannot write, file names for several
    inputs, two targets the same: every such name at once). ``available``: the formats the
    command can write (None: `live_formats`)."""
    available = live_formats() if available is None else available
    files: list[Path] = []
    dirs: list[Path] = []
    for out in outputs:
        fmt = format_of(out)
        if fmt is not None and not Path(out).is_dir():
            if fmt not in available:
                raise UserError(f"{out}: {_NOT_STREAMED}")
            files.append(Path(out))
        elif folders and _is_folder(out):
            dirs.append(Path(out))
        else:
            where = ", or be a folder" if folders else ""
            raise UserError(f"{out}: output must end in {_suffixes(available)}{where}")
    if formats is not None and not dirs:
        if files:
            raise UsageError(
                "--format names the files written into an output folder (-o DIR); "
                "-o FILE takes its format from the suffix"
            )
        dirs.append(Path("."))
    if files and len(inputs) > 1:
        raise UsageError(
            f"{len(inputs)} input files: -o takes a folder (-o DIR --format srt,vtt), "
            "not file names"
        )
    kinds = _formats(formats, available) if formats is not None else tuple(available)
    plan = [
        files + [d / f"{Path(src).stem}.{fmt}" for d in dirs for fmt in kinds] for src in inputs
    ]
    _check_unique(inputs, plan)
    _check_not_inputs(inputs, plan)
    for d in dirs:
        _make_folder(d)
    for t in {t for targets in plan for t in targets}:
        check_writable(t)
    return plan


def _check_unique(inputs: Sequence[str], plan: Sequence[Sequence[Path]]) -> None:
    """UserError naming every target planned twice (a name given twice, or two inputs with
    the same stem into one folder), grouped by the inputs that share them."""
    sources: dict[Path, list[str]] = {}
    shown: dict[Path, Path] = {}
    for src, targets in zip(inputs, plan, strict=True):
        for t in targets:
            key = Path(os.path.abspath(t))
            sources.setdefault(key, []).append(src)
            shown.setdefault(key, t)
    clashes: dict[tuple[str, ...], list[str]] = {}
    for key, given in sources.items():
        if len(given) > 1:
            clashes.setdefault(tuple(dict.fromkeys(given)), []).append(str(shown[key]))
    if not clashes:
        return
    parts = []
    for srcs, names in clashes.items():
        are = "is" if len(names) == 1 else "are"
        of = f"the output{'' if len(names) == 1 else 's'} of {' and '.join(srcs)}"
        parts.append(f"{', '.join(names)} {are} {'given twice' if len(srcs) == 1 else of}")
    raise UserError(f"{'; '.join(parts)}: each caption file needs its own name")


def _check_not_inputs(inputs: Sequence[str], plan: Sequence[Sequence[Path]]) -> None:
    """UserError for a target that is one of the inputs (the same path, a symlink or a hard
    link to it), before anything is created or opened: ``transcribe same.srt -o same.srt``
    truncated its own input (red team 2026-12-05, bug 15)."""
    for t in dict.fromkeys(t for targets in plan for t in targets):
        for src in inputs:
            if _same_file(t, Path(src)):
                raise UserError(
                    f"{printable(str(t))} is the input {printable(src)}: writing it would "
                    "overwrite it; give the caption file another name"
                )


def _same_file(a: Path, b: Path) -> bool:
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)  # a hard link; a missing file is not the input
    except OSError:
        return False


def _make_folder(d: Path) -> None:
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"cannot create output folder {d}: {e.strerror or e}") from None


def check_writable(path: Path) -> None:
    """UserError unless `path` can be created or overwritten — without touching it: a probe
    file in its folder tells what permission bits do not (root, read-only mounts)."""
    if path.is_dir():
        raise UserError(f"cannot write {printable(str(path))}: it is a folder")
    folder = path.parent
    if not folder.is_dir():
        missing = "is not a folder" if folder.exists() else "does not exist"
        raise UserError(f"cannot write {printable(str(path))}: {printable(str(folder))} {missing}")
    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".streamcap-", suffix=".probe"):
            pass
        if path.exists():
            with open(path, "a", encoding="utf-8"):
                pass
    except OSError as e:
        raise UserError(f"cannot write {printable(str(path))}: {e.strerror or e}") from None


class Writers:
    """The caption files of one input, appended to and flushed per final (`streamcap.formats`):
    whatever stops the run, each file is valid and holds every final so far."""

    def __init__(
        self,
        paths: Sequence[Path],
        *,
        include_partials: bool = False,
        style: CueStyle = DEFAULT_CUES,
        title: str = "",
    ) -> None:
        self.paths = list(paths)
        self._writers: list[CaptionWriter] = []
        try:
            for p in self.paths:  # `title`: the heading of .md minutes (the input's name)
                self._writers.append(
                    open_writer(p, include_partials=include_partials, style=style, title=title)
                )
        except OSError as e:
            self.close()
            raise UserError(f"cannot write {e.filename or p}: {e.strerror or e}") from None
        except BaseException:
            self.close()
            raise

    def write(self, caption: Caption, decoded: Decoded | None = None) -> None:
        """Append `caption` to every file (`decoded`: the decode it came from, for JSON)."""
        for w in self._writers:
            w.write(caption, decoded)

    def close(self) -> None:
        for w in self._writers:
            w.close()

    def say_wrote(self) -> None:
        """``wrote PATH`` on stderr for each file: a run that ends says where its files are."""
        for p in self.paths:
            say(f"wrote {printable(str(p))}")

    def __enter__(self) -> Writers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
