"""``-o/--output`` and ``--format``: which caption files each input writes, checked up front.

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
from pathlib import Path
from typing import TYPE_CHECKING

from streamcap.cli.common import UsageError
from streamcap.errors import UserError
from streamcap.formats import FORMATS, CaptionWriter, format_of, open_writer

if TYPE_CHECKING:
    from streamcap.core.captions import Caption


def add_output_flags(p: argparse.ArgumentParser, *, folders: bool = True) -> None:
    """-o/--output (and --format where outputs can be folders: one file per input)."""
    where = (
        "a file, its format by suffix (.srt, .vtt, .jsonl or .txt), or a folder that gets "
        "<input name>.<format> for each --format"
        if folders
        else "a file, its format by suffix (.srt, .vtt, .jsonl or .txt)"
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
            "--format",
            metavar="LIST",
            help="formats written into an -o folder, comma-separated from "
            f"{','.join(FORMATS)} or all (default: all; without -o: into the current folder)",
        )


def _formats(value: str) -> tuple[str, ...]:
    names = [x.strip().lower().lstrip(".") for x in value.split(",") if x.strip()]
    if names == ["all"]:
        return FORMATS
    bad = [x for x in names if x not in FORMATS]
    if bad or not names:
        raise UsageError(
            f"--format: unknown format {', '.join(bad) or value!r} "
            f"(use {', '.join(FORMATS)} or all)"
        )
    return tuple(dict.fromkeys(names))


def _is_folder(out: str) -> bool:
    """An existing folder, a name ending in a slash, or a name with no suffix at all."""
    p = Path(out)
    return p.is_dir() or out.endswith(("/", os.sep)) or not p.suffix


def plan_outputs(
    inputs: Sequence[str], outputs: Sequence[str], formats: str | None, *, folders: bool = True
) -> list[list[Path]]:
    """The caption files of each input, in input order; UsageError / UserError if they cannot
    be written (unknown suffix, file names for several inputs, two targets the same)."""
    files: list[Path] = []
    dirs: list[Path] = []
    for out in outputs:
        if format_of(out) is not None and not Path(out).is_dir():
            files.append(Path(out))
        elif folders and _is_folder(out):
            dirs.append(Path(out))
        else:
            where = ", or be a folder" if folders else ""
            raise UserError(f"{out}: output must end in .srt, .vtt, .jsonl or .txt{where}")
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
    kinds = _formats(formats) if formats is not None else FORMATS
    plan = [
        files + [d / f"{Path(src).stem}.{fmt}" for d in dirs for fmt in kinds] for src in inputs
    ]
    seen: dict[Path, str] = {}
    for src, targets in zip(inputs, plan, strict=True):
        for t in targets:
            key = Path(os.path.abspath(t))
            if key in seen:
                why = "is given twice" if seen[key] == src else f"is the output of {seen[key]} too"
                raise UserError(f"{t} {why}: each caption file needs its own name")
            seen[key] = src
    for d in dirs:
        _make_folder(d)
    for t in {t for targets in plan for t in targets}:
        check_writable(t)
    return plan


def _make_folder(d: Path) -> None:
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"cannot create output folder {d}: {e.strerror or e}") from None


def check_writable(path: Path) -> None:
    """UserError unless `path` can be created or overwritten — without touching it: a probe
    file in its folder tells what permission bits do not (root, read-only mounts)."""
    if path.is_dir():
        raise UserError(f"cannot write {path}: it is a folder")
    folder = path.parent
    if not folder.is_dir():
        missing = "is not a folder" if folder.exists() else "does not exist"
        raise UserError(f"cannot write {path}: {folder} {missing}")
    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".streamcap-", suffix=".probe"):
            pass
        if path.exists():
            with open(path, "a", encoding="utf-8"):
                pass
    except OSError as e:
        raise UserError(f"cannot write {path}: {e.strerror or e}") from None


class Writers:
    """The caption files of one input, appended to and flushed per final (`streamcap.formats`):
    whatever stops the run, each file is valid and holds every final so far."""

    def __init__(self, paths: Sequence[Path], *, include_partials: bool = False) -> None:
        self.paths = list(paths)
        self._writers: list[CaptionWriter] = []
        try:
            for p in self.paths:
                self._writers.append(open_writer(p, include_partials=include_partials))
        except OSError as e:
            self.close()
            raise UserError(f"cannot write {e.filename or p}: {e.strerror or e}") from None
        except BaseException:
            self.close()
            raise

    def write(self, caption: Caption) -> None:
        for w in self._writers:
            w.write(caption)

    def close(self) -> None:
        for w in self._writers:
            w.close()

    def __enter__(self) -> Writers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
