"""``-`` as an input (standard input) and the flags of raw PCM there, for `transcribe` and
`publish`.

Standard input may carry any container FFmpeg reads (WAV, MP3, Ogg, MPEG-TS, ...: PyAV tells
which) or raw PCM, whose layout nothing in the bytes says: ``--rate R`` (and the sample format
and ``--channels``) says it is raw and how. `transcribe -` copies the input whole to a
temporary file first (`stdin_spooled`: offline transcription measures its input); `publish -`
reads it as it comes.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

from streamcap.cli.common import UsageError
from streamcap.cli.numbers import positive_int

if TYPE_CHECKING:
    from streamcap.audio.stream_input import RawPcm

#: The input name that means standard input, and the name its outputs take (``stdin.srt``).
STDIN = "-"
STDIN_NAME = "stdin"
RAW_FORMATS = ("s16le", "f32le")


def add_raw_flags(g: argparse._ArgumentGroup, format_flag: str) -> None:
    """The raw PCM flags: `format_flag` (``--format`` in publish, whose outputs have no
    format; ``--input-format`` in transcribe, whose ``--format`` is the output's), ``--rate``
    and ``--channels``."""
    g.add_argument(
        format_flag, dest="raw_format", choices=RAW_FORMATS,
        help="standard input (-) is raw PCM of this sample format (with --rate; default: "
        "s16le, 16-bit little-endian)",
    )  # fmt: skip
    g.add_argument(
        "--rate", type=positive_int, metavar="HZ",
        help="standard input (-) is raw PCM at this sample rate (default: a container, which "
        "says its own)",
    )  # fmt: skip
    g.add_argument(
        "--channels", type=positive_int, metavar="N",
        help="raw PCM's channels, interleaved (default: 1)",
    )  # fmt: skip


def raw_from_args(
    args: argparse.Namespace, sources: Sequence[str], format_flag: str
) -> RawPcm | None:
    """The raw PCM layout the flags give, or None (standard input is a container, or no
    input is standard input); UsageError for flags without ``-`` or without ``--rate``."""
    given = [
        flag
        for flag, value in ((format_flag, args.raw_format), ("--rate", args.rate),
                            ("--channels", args.channels))
        if value is not None
    ]  # fmt: skip
    if not given:
        return None
    if STDIN not in sources:
        raise UsageError(f"{', '.join(given)}: raw PCM on standard input: give - as the input")
    if args.rate is None:
        raise UsageError(f"{', '.join(given)}: raw PCM needs --rate (nothing in it says its rate)")
    from streamcap.audio.stream_input import RawPcm

    try:
        return RawPcm(args.raw_format or "s16le", args.rate, args.channels or 1)
    except ValueError as e:
        raise UsageError(str(e)) from None


def check_stdin_once(sources: Sequence[str]) -> None:
    """UsageError when ``-`` is given twice (standard input is read once)."""
    if list(sources).count(STDIN) > 1:
        raise UsageError("- (standard input) can be given once")


def input_name(source: str) -> str:
    """What an input's outputs and messages are named after: ``stdin`` for ``-``."""
    return STDIN_NAME if source == STDIN else source


def stdin_is_terminal() -> bool:
    return sys.stdin is None or sys.stdin.isatty()


@contextmanager
def stdin_spooled(sources: Sequence[str], raw: RawPcm | None) -> Iterator[list[str]]:
    """`sources` with ``-`` replaced by a temporary file holding all of standard input
    (deleted at the end); UsageError when standard input is a terminal."""
    if STDIN not in sources:
        yield list(sources)
        return
    if stdin_is_terminal():
        raise UsageError(
            "- reads audio from standard input, which is a terminal: pipe audio in "
            "(e.g. ffmpeg -i talk.mp4 -f wav - | streamcap transcribe -)"
        )
    from streamcap.audio.stream_input import spool_stdin

    path = spool_stdin(sys.stdin.buffer, raw)
    try:
        yield [str(path) if s == STDIN else s for s in sources]
    finally:
        path.unlink(missing_ok=True)
