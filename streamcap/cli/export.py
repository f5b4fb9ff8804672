"""`streamcap export REC.jsonl -f md [-o FILE]`: a recording made by `serve --record DIR` as
minutes, a plain transcript or subtitles, after the meeting, without a server.

The recording is read as the server reads it back (`server.record_lines`: every field
checked as a client's input); a line that fails is skipped, and one warning says how many and
why the first failed, so a damaged file still gives everything that can be read. A names line
(``{"type": "names", "names": {"Speaker 2": "Mary"}, ...}``, what a rename on the server
writes) is checked as the server checks it (`record_lines.parse_names`); the last one is the
map in force, applied to every final (`apply_names`), past and future, as the server's own
downloads do. The file is made whole, finals in order of their start, with the same renderers
as `/streams/ID.srt|.vtt|.txt|.md`, so an export and a download of one stream agree. Without
``-o`` it goes to stdout (UTF-8), so it can be piped.
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from streamcap.cli.common import UsageError, say
from streamcap.core.safe_text import printable
from streamcap.errors import UserError
from streamcap.formats.registry import format_of, live_formats

if TYPE_CHECKING:
    from streamcap.core.captions import Caption

PROG = "streamcap export"
#: The format when neither -f nor the -o file's suffix names one: minutes.
DEFAULT_FORMAT = "md"


@dataclass(frozen=True)
class ExportCommand:
    """What `streamcap export` is asked (built once from its flags)."""

    recording: str
    format: str = DEFAULT_FORMAT
    output: str | None = None  # None: stdout

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> ExportCommand:
        return cls(args.recording, export_format(args.format, args.output), args.output)


def add_arguments(p: argparse.ArgumentParser, command: str) -> None:
    kinds = ", ".join(live_formats())
    p.add_argument(
        "recording",
        metavar="REC.jsonl",
        help="a recording of `streamcap serve --record DIR` (DIR/<stream>.jsonl)",
    )
    p.add_argument(
        "-f",
        "--format",
        metavar="FORMAT",
        help=f"one of {kinds} (default: the -o file's suffix, else {DEFAULT_FORMAT}: minutes)",
    )
    p.add_argument("-o", "--output", metavar="FILE", help="write the file here (default: stdout)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """The command's edge: the flags become an `ExportCommand`."""
    return export(ExportCommand.from_args(args))


def export_format(flag: str | None, output: str | None) -> str:
    """The format asked for: ``-f``, else the ``-o`` file's suffix, else minutes; UsageError
    for one that cannot be made from a recording's finals, or two that disagree."""
    available = live_formats()
    by_suffix = format_of(output) if output else None
    if flag is None:
        name = by_suffix or DEFAULT_FORMAT
    else:
        name = flag.strip().lower().lstrip(".")
        if by_suffix is not None and by_suffix != name:
            raise UsageError(
                f"-o {printable(output or '')} is a .{by_suffix} file but --format is {name}: "
                "give one of them"
            )
    if name not in available:
        why = (
            "openai-whisper's JSON holds each final's decode (tokens, avg_logprob), which a "
            "recording does not keep"
            if name == "json"
            else "unknown format"
        )
        raise UsageError(f"--format {printable(name)}: {why} (use {', '.join(available)})")
    return name


@dataclass
class Recording:
    """What a recording holds: its finals (file order), the names map in force, and the lines
    that could not be read."""

    finals: list[Caption] = field(default_factory=list)
    names: dict[str, str] = field(default_factory=dict)
    bad: int = 0
    first_bad: str = ""  # "line N: why"

    def skip(self, number: int, why: str) -> None:
        self.bad += 1
        if not self.first_bad:
            self.first_bad = f"line {number}: {why}"


def export(cmd: ExportCommand) -> int:
    rec_path = cmd.recording
    if cmd.output is not None:
        _check_output(cmd.output, rec_path)
    rec, mtime = read_recording(rec_path)
    shown = printable(rec_path)
    if rec.bad:
        say(
            f"{PROG}: warning: skipped {rec.bad} unreadable line(s) of {shown} "
            f"({printable(rec.first_bad)})"
        )
    if not rec.finals:
        say(f"{PROG}: {shown} holds no captions")
    finals = apply_names(rec.finals, rec.names)
    title = Path(rec_path).stem
    day = time.strftime("%Y-%m-%d", time.localtime(mtime))
    doc = render(cmd.format, finals, title=title, date=day)
    if cmd.output is None:
        sys.stdout.flush()
        sys.stdout.buffer.write(doc.encode("utf-8", "replace"))
        sys.stdout.buffer.flush()
        return 0
    try:
        with open(cmd.output, "w", encoding="utf-8", newline="\n", errors="replace") as f:
            f.write(doc)
    except OSError as e:
        raise UserError(f"cannot write {printable(cmd.output)}: {e.strerror or e}") from None
    say(f"wrote {printable(cmd.output)}")
    return 0


def _check_output(output: str, recording: str) -> None:
    """UserError before anything is read for an output that cannot be written, or that is the
    recording itself."""
    from streamcap.cli.outputs import check_writable

    out = Path(output)
    try:
        same = out.exists() and os.path.samefile(out, recording)
    except OSError:
        same = False
    if same or os.path.realpath(out) == os.path.realpath(recording):
        raise UserError(
            f"{printable(output)} is the recording {printable(recording)}: writing it would "
            "overwrite it; give the file another name"
        )
    check_writable(out)


def read_recording(path: str) -> tuple[Recording, float]:
    """The recording at `path` and its modification time; UserError (one line) for a file
    that is missing, not a regular file, or unreadable."""
    from streamcap.server.record_index import NotRegularFile, open_regular

    shown = printable(path)
    try:
        fd = open_regular(Path(path), os.O_RDONLY)
    except NotRegularFile:
        kind = "a folder" if os.path.isdir(path) else "not a regular file"
        raise UserError(f"cannot read {shown}: it is {kind}") from None
    except OSError as e:
        raise UserError(f"cannot read {shown}: {e.strerror or e}") from None
    if fd is None:
        raise UserError(f"cannot read {shown}: no such file")
    try:
        mtime = os.fstat(fd).st_mtime
        return parse_recording(_lines(fd)), mtime
    except OSError as e:
        raise UserError(f"cannot read {shown}: {e.strerror or e}") from None
    finally:
        os.close(fd)


def _lines(fd: int) -> Iterator[bytes | None]:
    """Every line of the file (None for one too long to hold), the last one also when it has
    no line break (a file written by hand; a line cut off by a crash fails its check)."""
    from streamcap.server.record_index import complete_lines
    from streamcap.server.record_lines import MAX_LINE_BYTES

    done = 0
    for _, after, line in complete_lines(fd, 0):
        done = after
        yield line
    rest = os.fstat(fd).st_size - done
    if rest > 0:
        yield os.pread(fd, rest, done) if rest <= MAX_LINE_BYTES else None


def parse_recording(lines: Iterator[bytes | None]) -> Recording:
    """The finals and names map of a recording's lines, each checked as the server checks a
    recorded line; partials (never recorded, but harmless) and blank lines are passed over."""
    from streamcap.server.record_lines import MAX_LINE_BYTES, BadLine, parse_line, parse_names

    rec = Recording()
    for number, line in enumerate(lines, 1):
        if line is None:
            rec.skip(number, f"longer than {MAX_LINE_BYTES} bytes")
            continue
        if not line.strip():
            continue
        try:
            names = parse_names(line) if b'"names"' in line else None  # a rename's line
            if names is not None:
                rec.names = names  # the whole map in force from here on
                continue
            caption = parse_line(line)
        except BadLine as e:
            rec.skip(number, str(e))
            continue
        if caption is not None:
            rec.finals.append(caption)
    return rec


def apply_names(finals: Sequence[Caption], names: Mapping[str, str]) -> list[Caption]:
    """`finals` with each speaker shown as the names map says (`core.speaker_names`)."""
    from streamcap.core.speaker_names import renamed

    return [renamed(c, names) for c in finals] if names else list(finals)


def render(name: str, finals: Sequence[Caption], *, title: str = "", date: str = "") -> str:
    """The whole file of format `name` for `finals`, in order of their start: the server's
    renderers for its downloads (subtitle cues of overlapping finals interleaved), any other
    format by its registered writer."""
    from streamcap.formats.base import in_time_order
    from streamcap.formats.minutes import render_minutes
    from streamcap.formats.registry import WriterOptions, open_format
    from streamcap.formats.subtitles import render_srt, render_vtt
    from streamcap.formats.text import render_txt

    if name == "md":
        return render_minutes(finals, title=title, date=date)
    whole = {"srt": render_srt, "vtt": render_vtt, "txt": render_txt}.get(name)
    if whole is not None:
        return whole(finals)
    buf = io.StringIO()
    with open_format(name, buf, WriterOptions(title=title, date=date)) as writer:
        writer.write_all(in_time_order(finals))
    return buf.getvalue()
