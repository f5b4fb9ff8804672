"""`streamcap transcribe --speakers auto FILE`: speaker labels on a file's offline finals, by the
live path's labeller (`runtime.file_labeller.FileLabeller` around `SpeakerLabeller`).

Real audio, the real command: two recorded voices of tests/data taking turns (the librivox
reader and JFK, as tests/voicekit.py builds them), with the bundled Whisper base model.
About 27 s of audio: ~20-40 s on two shared cores, the model load included.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile as sf
from clikit import parse_srt
from voicekit import SR, two_voices

ROOT = Path(__file__).resolve().parents[2]


def voice_of(c: dict[str, Any], spans: list[tuple[float, float, str]]) -> str:
    """The voice whose clip overlaps the final most."""
    overlap = [min(c["end"], b) - max(c["start"], a) for a, b, _ in spans]
    return spans[int(np.argmax(overlap))][2]


@pytest.mark.model
def test_transcribe_labels_each_voice_of_a_file(speech, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    audio, spans = two_voices(speech)
    wav = tmp_path / "turns.wav"
    sf.write(wav, audio, SR, subtype="PCM_16")
    jsonl, srt = tmp_path / "turns.jsonl", tmp_path / "turns.srt"
    res = subprocess.run(
        [sys.executable, "-m", "streamcap.cli", "transcribe", str(wav), "--language", "en",
         "--speakers", "auto", "-o", str(jsonl), "-o", str(srt)],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    finals = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert len(finals) >= 4, finals
    assert all(f["type"] == "final" and f["speaker"] for f in finals)
    by_voice: dict[str, set[str]] = {"reader": set(), "jfk": set()}
    for f in finals:
        by_voice[voice_of(f, spans)].add(f["speaker"])
    assert by_voice == {"reader": {"Speaker 1"}, "jfk": {"Speaker 2"}}, finals
    # the label changes exactly where the voice does, in the captions' own order
    voices = [voice_of(f, spans) for f in finals]
    changes = [i for i in range(1, len(finals)) if voices[i] != voices[i - 1]]
    assert changes == [
        i for i in range(1, len(finals)) if finals[i]["speaker"] != finals[i - 1]["speaker"]
    ]
    assert len(changes) == 3  # reader, JFK, reader, JFK
    starts = [f["start"] for f in finals]
    assert "seq" not in finals[0] and starts == sorted(starts)
    # stdout names the speaker of each line; SRT names it on a change only
    assert res.stdout.splitlines()[0].startswith("Speaker 1: ")
    cues = parse_srt(srt.read_text())
    named = [c[3].split(":")[0] for c in cues if c[3].startswith("Speaker ")]
    assert named == ["Speaker 1", "Speaker 2", "Speaker 1", "Speaker 2"], cues


def test_split_pieces_join_words_as_each_path_spells_them() -> None:
    """Offline words are Whisper's tokens (" Today"), live ones bare ("Today")."""
    from streamcap.core.decode_types import WordTiming
    from streamcap.runtime.labeller import join_words

    spaced = (WordTiming(" Today", 0.0, 0.4, 0.9), WordTiming(" we", 0.5, 0.7, 0.9))
    bare = (WordTiming("Today", 0.0, 0.4, 0.9), WordTiming("we", 0.5, 0.7, 0.9))
    assert join_words(spaced) == join_words(bare) == "Today we"


def test_calibration_sets_the_threshold_where_the_two_errors_meet() -> None:
    from streamcap.evaluation import calibrate_speakers as cal  # scripts/calibrate_speakers.py

    target = [(s, 1.0) for s in (0.70, 0.80, 0.85, 0.90)]
    nontarget = [(s, 1.0) for s in (0.40, 0.50, 0.60, 0.75)]
    threshold, eer = cal.weighted_eer(target, nontarget)
    assert 0.70 < threshold <= 0.75 and eer == pytest.approx(0.25)  # one error of four each
    # a voice's weight, not its number of trials: one heavy voice does not set it alone
    heavy = [(0.95, 1 / 40)] * 40 + [(0.70, 1.0)]
    threshold, _ = cal.weighted_eer(heavy, nontarget)
    assert threshold < 0.75
    # the least similarity that at most a quarter of the non-targets reach: just above 0.60
    t = cal.far_threshold(nontarget, 0.25)
    assert 0.60 < t < 0.61 and sum(s >= t for s, _ in nontarget) == 1
    assert cal.voice("espeak-ng de+f2") == "espeak_f" and cal.voice("joe") == "piper_joe"
