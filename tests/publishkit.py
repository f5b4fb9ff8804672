"""`streamcap publish` as a user runs it, for the tests: a real subprocess whose status lines
are collected as they come, a clip of several real utterances, and what a recording holds."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf
from clikit import ROOT

DATA = ROOT / "tests" / "data"
TOKEN = "pub-secret-7f3a"  # found nowhere in a log, a status line or a process list
#: The clip's parts, in order, each followed by 0.8 s of silence, and what each says.
PARTS = {
    "en_real_jfk": "and so my fellow americans ask not what your country can do for you ask "
    "what you can do for your country",
    "en_real_librivox_0870": "and mister john dashwood had then leisure to consider how much "
    "there might be prudently in his power to do for them",
    "en_tts_piper_joe_s07": "let's take the last five minutes for questions from the audience",
    "en_real_librivox_0880": "he was not an ill disposed young man",
    "en_real_praatio_mary": "mary rolled the barrel",
}


def make_clip(path: Path) -> Path:
    """The parts one after another (30 s of real speech at 16 kHz) as a WAV at `path`."""
    pieces = []
    for name in PARTS:
        audio, rate = sf.read(DATA / f"{name}.wav", dtype="float32")
        assert rate == 16000
        pieces += [audio if audio.ndim == 1 else audio.mean(axis=1), np.zeros(12800, np.float32)]
    sf.write(path, np.concatenate(pieces), 16000)
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def finals(record: Path, stream: str) -> list[dict[str, Any]]:
    """The finals a server recorded for `stream` (its `--record` folder), in seq order."""
    path = record / f"{stream}.jsonl"
    rows = [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []
    return sorted((r for r in rows if r.get("type") == "final"), key=lambda r: r["seq"])


def words(text: str) -> list[str]:
    import re

    return re.sub(r"[^a-z0-9' ]+", " ", text.lower().replace("-", " ").replace("mr.", "mister"))\
        .split()  # fmt: skip


def coverage(text: str) -> dict[str, float]:
    """Per part of the clip, the share of its words found in `text` (order-free)."""
    said = set(words(text))
    return {name: sum(w in said for w in ref.split()) / len(ref.split())
            for name, ref in PARTS.items()}  # fmt: skip


class Publish:
    """`streamcap publish ARGS` in its own process, stderr read line by line."""

    def __init__(self, *args: str, env: dict[str, str] | None = None, stdin: Any = None) -> None:
        self.cmd = [sys.executable, "-m", "streamcap.cli", "publish", *args]
        self.proc = subprocess.Popen(
            self.cmd, stdin=stdin if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
            env={**os.environ, **(env or {})},
        )  # fmt: skip
        self.lines: list[str] = []
        self.stdout = ""
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))

    def wait_for(self, text: str, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(text in line for line in self.lines):
                return True
            if self.proc.poll() is not None:
                time.sleep(0.2)
                return any(text in line for line in self.lines)
            time.sleep(0.1)
        return False

    def wait(self, timeout: float) -> int:
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.stop(signal.SIGKILL)
            raise AssertionError(f"publish did not end in {timeout} s:\n{self.text()}") from None
        assert self.proc.stdout is not None
        self.stdout = self.proc.stdout.read()
        self._reader.join(10)
        return rc

    def stop(self, sig: int = signal.SIGINT) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)

    def text(self) -> str:
        return "\n".join(self.lines)
