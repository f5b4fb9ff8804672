"""``streamcap transcribe`` and ``streamcap models`` as a user runs them (real subprocesses)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"


def run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streamcap.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_transcribe_writes_text_and_subtitles(tmp_path):
    srt, vtt, jsonl = tmp_path / "a.srt", tmp_path / "a.vtt", tmp_path / "a.jsonl"
    # a video file with an AAC track at 44.1 kHz stereo: exercises PyAV and resampling
    import soundfile as sf
    from test_audio import encode

    audio, _ = sf.read(DATA / "en_real_jfk.wav", dtype="float32")
    mp3 = encode(audio, tmp_path / "jfk.mp4", "mp4", "aac", 44100, "stereo", video=True)
    res = run(
        "transcribe",
        str(mp3),
        "--language",
        "en",
        "-o",
        str(srt),
        "-o",
        str(vtt),
        "-o",
        str(jsonl),
        "--timestamps",
    )
    assert res.returncode == 0, res.stderr
    assert "ask not what your country can do for you" in res.stdout.lower()
    assert res.stdout.startswith("[00:00.")
    assert "-->" in srt.read_text() and "00:00:0" in srt.read_text()
    assert vtt.read_text().startswith("WEBVTT")
    events = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert events and all(e["type"] == "final" for e in events)
    assert events[-1]["end"] == pytest.approx(11.0, abs=0.6)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["transcribe", "/no/such.wav"], "not found"),
        (["transcribe", "{empty}"], "empty file"),
        (["transcribe", "{corrupt}"], "cannot decode"),
        (["transcribe", str(DATA / "sv_real_silence_u0016001.wav")], "no speech found"),
        (["transcribe", str(DATA / "en_real_forever.wav"), "--model", "large-v9"], "unknown model"),
        (
            ["transcribe", str(DATA / "en_real_forever.wav"), "--model", "org/whisper-x"],
            "not reachable",
        ),
        (["transcribe", str(DATA / "en_real_forever.wav"), "--language", "xx"], "unknown language"),
        (["transcribe", str(DATA / "en_real_forever.wav"), "-o", "x.doc"], "must end in"),
    ],
)
def test_bad_input_is_one_clear_line(args, message, tmp_path, monkeypatch):
    """No sockets leave this machine; the hub-id case relies on that (it must fail fast)."""
    empty = tmp_path / "empty.wav"
    empty.write_bytes(b"")
    corrupt = tmp_path / "corrupt.mp3"
    corrupt.write_bytes(b"\x00garbage" * 100)
    args = [a.format(empty=empty, corrupt=corrupt) for a in args]
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    res = run(*args)
    assert res.returncode != 0
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert "Traceback" not in res.stderr
    assert message in lines[-1], res.stderr


def test_models_lists_bundled_models():
    res = run("models")
    assert res.returncode == 0
    assert "base" in res.stdout and "tiny.en" in res.stdout
