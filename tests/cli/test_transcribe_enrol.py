"""`--enroll NAME=FILE` (issue 37, item 4): a recording of one person makes the labeller know
the voice, so the first caption of that voice carries the name instead of "Speaker N".

Real audio, the real command, the bundled Whisper base model: JFK, the librivox reader, JFK
again (tests/data), the reader enrolled from another of her utterances (0880; the meeting has
0870). Offline and through the live pipeline (`--live --clock simulated`). Bad ``--enroll``
values are one line each, before the model loads.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile as sf
from clikit import run
from voicekit import JFK_CUT_S, SR, clip

DATA = Path(__file__).resolve().parents[1] / "data"
READER = DATA / "en_real_librivox_0880.wav"


def meeting(speech: dict[str, Any], path: Path) -> list[tuple[float, float, str]]:
    """JFK's first half, the reader (0870), JFK's second half, 1.5 s apart: the spans."""
    jfk = clip(speech, "en_real_jfk")
    cut = int(JFK_CUT_S * SR)
    parts = [
        ("jfk", jfk[:cut]),
        ("reader", clip(speech, "en_real_librivox_0870")),
        ("jfk", jfk[cut:]),
    ]
    gap = np.zeros(int(1.5 * SR), np.float32)
    audio, spans, t = [gap], [], len(gap) / SR
    for who, x in parts:
        spans.append((t, t + len(x) / SR, who))
        audio += [x, gap]
        t += (len(x) + len(gap)) / SR
    sf.write(path, np.concatenate(audio), SR, subtype="PCM_16")
    return spans


def voice_of(c: dict[str, Any], spans: list[tuple[float, float, str]]) -> str:
    overlap = [min(c["end"], b) - max(c["start"], a) for a, b, _ in spans]
    return spans[int(np.argmax(overlap))][2]


@pytest.mark.model
@pytest.mark.parametrize("live", [False, True], ids=["offline", "live"])
def test_the_enrolled_voice_is_named_from_its_first_caption(
    speech: dict[str, Any], tmp_path: Path, live: bool
) -> None:
    wav, jsonl = tmp_path / "standup.wav", tmp_path / "standup.jsonl"
    spans = meeting(speech, wav)
    mode = ["--live", "--clock", "simulated", "--no-partials"] if live else []
    res = run(
        "transcribe", str(wav), "--language", "en", "--speakers", "auto",
        "--enroll", f"Ada={READER}", "-o", str(jsonl), *mode,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    finals = [json.loads(x) for x in jsonl.read_text().splitlines()]
    finals = [f for f in finals if f["type"] == "final" and f["text"].strip()]
    by_voice = {"jfk": [], "reader": []}  # type: dict[str, list[str]]
    for f in finals:
        by_voice[voice_of(f, spans)].append(f["speaker"])
    assert by_voice["reader"] and set(by_voice["reader"]) == {"Ada"}, finals
    assert by_voice["jfk"] and set(by_voice["jfk"]) == {"Speaker 1"}, finals  # numbered as ever
    assert any(line.startswith("Ada: ") for line in res.stdout.splitlines()) or live, res.stdout


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--enroll", "Ada"], "use NAME=FILE"),
        (["--enroll", "Speaker 3=x.wav"], "automatic label"),
        (["--enroll", "A<b>=x.wav"], "invalid speaker name"),
        (["--enroll", f"Ada={READER}", "--enroll", f"Ada={READER}"], "given twice"),
        (["--enroll", "Ada=/nonexistent/ada.wav"], "audio file not found"),
    ],
)
def test_a_bad_enrolment_is_one_line_before_the_model_loads(
    tmp_path: Path, args: list[str], says: str
) -> None:
    wav = tmp_path / "a.wav"
    sf.write(wav, np.zeros(SR, np.float32), SR)
    res = run("transcribe", str(wav), "--speakers", "auto", *args, timeout=120)
    last = res.stderr.strip().splitlines()[-1]  # a usage error: the usage, then the line
    assert res.returncode != 0 and says in last and "Traceback" not in res.stderr, res.stderr
    res = run("transcribe", str(wav), "--enroll", f"Ada={READER}", timeout=120)
    assert res.returncode == 2 and "add --speakers auto" in res.stderr, res.stderr


def test_a_sample_too_short_to_name_a_voice_is_refused(tmp_path: Path) -> None:
    wav, short = tmp_path / "a.wav", tmp_path / "short.wav"
    sf.write(wav, np.zeros(SR, np.float32), SR)
    sf.write(short, sf.read(DATA / "en_real_praatio_mary.wav")[0][:SR], SR)
    res = run(
        "serve", "--port", "0", "--speakers", "auto", "--enroll", f"Mary={short}", timeout=120
    )
    assert res.returncode != 0 and "s of sound, at least 2 s needed" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr
