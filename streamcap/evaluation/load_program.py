"""What each publisher of scripts/load_test.py sends, and what was said when.

Apart from the load test's clients (`load_clients`) and its server (`load_server`): the long-form
reference recording (default: the shared eval-dev meeting, with its reference segments;
otherwise the clips of tests/data with pauses between them), cut for each publisher from its
own offset and looped, or split by turns between the speakers of one room.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile as sf

from streamcap.core.constants import SAMPLE_RATE
from streamcap.evaluation import paths

SR = SAMPLE_RATE
#: The default long-form reference: the shared dev set's four-speaker meeting (lf2).
LONGFORM = paths.LONGFORM / "lf2_tts_meeting.json"


def reference_audio(reference: Path, audio: str) -> Path:
    """The audio a long-form reference JSON names: relative to the JSON, to the eval set's root
    (the JSON's parent folder), or beside the JSON."""
    for candidate in (
        reference.parent / audio,
        reference.parent.parent / audio,
        reference.parent / Path(audio).name,
    ):
        if candidate.is_file():
            return candidate
    raise SystemExit(f"load_test: error: audio {audio!r} of {reference} not found")


CLIPS = paths.TEST_DATA


@dataclass
class Segment:
    start: float
    end: float
    text: str


@dataclass
class Program:
    """Audio a publisher sends and what was said when (times in stream seconds)."""

    audio: np.ndarray
    segments: list[Segment]


def load_program(reference: Path | None) -> Program:
    """The reference's audio and segments; none (or the default, absent): the English clips of
    tests/data, 1.2 s apart, each one segment."""
    if reference is not None and not reference.exists() and reference != LONGFORM:
        raise SystemExit(f"load_test: error: no such reference {reference}")
    if reference is not None and reference.exists():
        ref = json.loads(reference.read_text())
        audio, rate = sf.read(reference_audio(reference, ref["audio"]), dtype="float32")
        assert rate == SR, rate
        given = [Segment(s["start"], s["end"], s["text"]) for s in ref["segments"]]
        return Program(audio, given)
    parts: list[np.ndarray] = []
    segs: list[Segment] = []
    t = 0.0
    pause = np.zeros(int(1.2 * SR), np.float32)
    for line in (CLIPS / "manifest.jsonl").read_text().splitlines():
        item = json.loads(line)
        if item["lang"] != "en" or not item["text"]:
            continue
        clip, rate = sf.read(CLIPS / item["audio"], dtype="float32")
        assert rate == SR
        segs.append(Segment(t, t + len(clip) / SR, item["text"]))
        parts += [clip, pause]
        t += (len(clip) + len(pause)) / SR
    return Program(np.concatenate(parts), segs)


def turns_of(program: Program, talker: int, talkers: int, margin: float = 0.3) -> Program:
    """One talker's microphone in a room where ``talkers`` take turns: the reference segments
    go round the talkers in order, and each one hears only its own (silence elsewhere)."""
    audio = np.zeros_like(program.audio)
    mine = [s for k, s in enumerate(program.segments) if k % talkers == talker]
    for seg in mine:
        a = max(0, int((seg.start - margin) * SR))
        b = min(len(audio), int((seg.end + margin) * SR))
        audio[a:b] = program.audio[a:b]
    return Program(audio, mine)


def program_for(base: Program, offset: float, seconds: float) -> Program:
    """`base` from `offset`, looped, `seconds` long, with its segments shifted to match."""
    n = int(seconds * SR)
    total = len(base.audio)
    start = int(offset * SR) % total
    idx = (start + np.arange(n)) % total
    audio = base.audio[idx]
    dur = total / SR
    segs: list[Segment] = []
    shift = -start / SR
    while shift < seconds:
        for s in base.segments:
            a, b = s.start + shift, s.end + shift
            if a >= 0 and b <= seconds:
                segs.append(Segment(a, b, s.text))
        shift += dur
    segs.sort(key=lambda s: s.start)
    return Program(audio, segs)
