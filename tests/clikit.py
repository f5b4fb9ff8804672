"""Running the `streamcap` command as a user would (a real subprocess), and reading its SRT.

Shared by the tests of every layer that check a command's output."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run(
    *args: str, timeout: float = 300, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streamcap.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env=env,
    )


SRT_CUE = re.compile(
    r"(\d+)\n(\d\d:\d\d:\d\d,\d{3}) --> (\d\d:\d\d:\d\d,\d{3})\n((?:[^\n]+\n)+)\n", re.M
)


def parse_srt(text: str) -> list[tuple[int, str, str, str]]:
    """Cues of an SRT file; AssertionError unless the whole file is well-formed cues."""
    cues = [(int(m[1]), m[2], m[3], m[4].strip()) for m in SRT_CUE.finditer(text)]
    assert "".join(m[0] for m in SRT_CUE.finditer(text)) == text, text
    assert [c[0] for c in cues] == list(range(1, len(cues) + 1))
    return cues
