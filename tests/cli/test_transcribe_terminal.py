"""`transcribe --live` on a terminal: the partial is rewritten in place, each final gets its
own line (`cli.live.LiveLines`, the display `dictate` is to share). A real pseudo-terminal, the real
command and model on real speech."""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
JFK = Path(__file__).resolve().parents[1] / "data" / "en_real_jfk.wav"
CSI = re.compile(r"\x1b\[([0-9;?]*)([A-Za-z])")


def screen(raw: str) -> list[str]:
    """The lines a terminal shows at the end, for the few controls rich's live display uses:
    carriage return, erase line (``CSI 2K``) and cursor up (``CSI nA``); colours ignored."""
    lines = [""]
    row = 0
    pos = 0
    for m in re.finditer(r"\x1b\[[0-9;?]*[A-Za-z]|\r\n|\n|\r|[^\x1b\r\n]+", raw):
        tok = m.group(0)
        if tok in ("\n", "\r\n"):
            row += 1
            if row == len(lines):
                lines.append("")
        elif tok == "\r":
            pos = 0
        elif (c := CSI.fullmatch(tok)) is not None:
            if c[2] == "K" and c[1] == "2":
                lines[row] = ""
            elif c[2] == "A":
                row = max(0, row - int(c[1] or 1))
        else:
            lines[row] = lines[row][:pos] + tok
            pos += len(tok)
    return [x for x in lines if x.strip()]


@pytest.mark.model
def test_live_partial_is_rewritten_in_place_on_a_terminal() -> None:
    master, slave = pty.openpty()
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "200"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamcap.cli", "transcribe", str(JFK), "--live",
         "--language", "en", "--partial-interval", "1"],
        cwd=ROOT, env=env, stdout=slave, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    os.close(slave)
    chunks: list[bytes] = []

    def read() -> None:
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    _, stderr = proc.communicate(timeout=300)
    reader.join(10)
    os.close(master)
    raw = b"".join(chunks).decode(errors="replace")
    assert proc.returncode == 0, stderr
    drawn = {m for m in re.findall(r"partial #\d+ +[\d.]+- +[\d.]+  ([^\r\n\x1b]+)", raw)}
    assert len(drawn) >= 2, raw[-2000:]  # the partial grew while it was shown ...
    partial_lines = [x for x in raw.replace("\r\n", "\n").split("\n") if "partial #" in x]
    assert all(x.startswith(("\r", "\x1b")) for x in partial_lines)  # ... each over the last
    shown = screen(raw)
    assert shown and all("FINAL" in x for x in shown), shown  # no partial left on screen
    assert "ask not what your country" in " ".join(shown).lower()
    assert len(shown) == len(set(shown))
    assert "RTF" in stderr and "RTF" not in raw  # notes stay on stderr, off the caption lines
