"""Issue 35 (red team 2026-12-05, bugs 6, 9 and 15 and the file-name and truncated-FLAC
concerns): hostile files and file names through the real `streamcap transcribe` (a subprocess;
the bundled base model where one is loaded, `model` marker).
"""

from __future__ import annotations

import os
import resource
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from clikit import ROOT, run

DATA = Path(__file__).resolve().parents[1] / "data"
JFK = DATA / "en_real_jfk.wav"
SILENCE = DATA / "sv_real_silence_u0016001.wav"
LOADING = "loading model"
SPOKEN = "what you can do for your country"


def one_error(res: subprocess.CompletedProcess[str]) -> str:
    """`transcribe` failed in one line, before the model loaded, without a traceback."""
    assert res.returncode == 1, (res.stdout, res.stderr)
    assert LOADING not in res.stderr and "Traceback" not in res.stderr, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("streamcap transcribe: error: "), res.stderr
    return lines[0]


# --------------------------------------------------------------------------- bug 6


@pytest.mark.model
@pytest.mark.parametrize("live", [False, True], ids=["offline", "live"])
def test_one_nan_sample_in_a_float_wav_is_transcribed(tmp_path: Path, live: bool) -> None:
    """One NaN at 2.0 s of a float WAV reached the features: "RuntimeWarning: invalid value
    encountered in cast", then a traceback from the decoder (`max(): Expected reduction dim`)."""
    audio, rate = sf.read(JFK, dtype="float32")
    audio[32000] = np.nan
    audio[48000] = np.inf  # and an infinity: 0 as well, as on the wire
    wav = tmp_path / "nan.wav"
    sf.write(wav, audio, rate, subtype="FLOAT")
    res = run("transcribe", str(wav), *(["--live", "--no-partials"] if live else []))
    assert res.returncode == 0, res.stderr[-3000:]
    assert "Traceback" not in res.stderr and "RuntimeWarning" not in res.stderr, res.stderr
    assert SPOKEN in res.stdout.lower(), res.stdout


# --------------------------------------------------------------------------- bug 9


def _cap_address_space() -> None:  # in the child, before exec
    limit = 3 * 2**30  # 3 GiB: the model alone fits; the 1 Hz file asked for 4.2 GB at once
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


@pytest.mark.parametrize("live", [False, True], ids=["offline", "live"])
def test_a_one_hz_header_is_refused_at_once_under_a_memory_cap(tmp_path: Path, live: bool) -> None:
    """The JFK clip's 352 KB of samples under a header claiming 1 Hz: 49 h of "audio", which
    `transcribe` resampled 65 536 samples at a time into 4.2 GB blocks (past 4 GB of RSS in
    9-18 s). Now one line, before the model loads, within an address-space cap."""
    data = JFK.read_bytes()[44:]
    fmt = struct.pack("<IHHIIHH", 16, 1, 1, 1, 2, 2, 16)
    wav = tmp_path / "onehz.wav"
    wav.write_bytes(
        b"RIFF" + struct.pack("<I", 36 + len(data)) + b"WAVEfmt " + fmt + b"data"
        + struct.pack("<I", len(data)) + data
    )  # fmt: skip
    res = subprocess.run(
        [sys.executable, "-m", "streamcap.cli", "transcribe", str(wav),
         *(["--live"] if live else [])],
        capture_output=True, text=True, timeout=300, cwd=ROOT, preexec_fn=_cap_address_space,
    )  # fmt: skip
    line = one_error(res)
    assert "sample rate is 1 Hz, below the 8000 Hz" in line and str(wav) in line, line


# --------------------------------------------------------------------------- bug 15


def _outputs_that_are_the_input(tmp_path: Path) -> list[tuple[Path, list[str]]]:
    """(input, flags): each writes an output that is the input file itself."""
    same = tmp_path / "same.srt"  # a WAV named .srt
    folder = tmp_path / "d"
    folder.mkdir()
    in_folder = folder / "x.vtt"
    linked = tmp_path / "speech.wav"
    (tmp_path / "link.srt").symlink_to(linked)
    hard = tmp_path / "hard.wav"
    for p in (same, in_folder, linked, hard):
        p.write_bytes(JFK.read_bytes())
    os.link(hard, tmp_path / "hard.jsonl")
    return [
        (same, ["-o", str(same)]),
        (same, ["-o", "same.srt"]),  # relative, from the input's folder
        (in_folder, ["-o", str(folder), "--format", "vtt,srt"]),  # DIR/<stem>.vtt
        (linked, ["-o", str(tmp_path / "link.srt")]),  # a symlink to the input
        (hard, ["-o", str(tmp_path / "hard.jsonl")]),  # a hard link to it
    ]


def test_an_output_that_is_the_input_is_refused_before_anything_opens(tmp_path: Path) -> None:
    """`transcribe same.srt -o same.srt` (a WAV named .srt) truncated its own input: "empty
    file (0 bytes)", and the recording was gone."""
    for src, flags in _outputs_that_are_the_input(tmp_path):
        before = src.read_bytes()
        res = subprocess.run(
            [sys.executable, "-m", "streamcap.cli", "transcribe", str(src), *flags],
            capture_output=True, text=True, timeout=300, cwd=src.parent,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )  # fmt: skip
        line = one_error(res)
        assert "is the input" in line and "would overwrite it" in line, (flags, line)
        assert src.read_bytes() == before, flags


# --------------------------------------------------------------------------- file names


def test_a_file_name_cannot_drive_the_terminal(tmp_path: Path) -> None:
    """A missing file's name was printed raw, ESC included: `no such<ESC>[31m.wav`."""
    name = tmp_path / "no such\x1b[31m\n\u202eevil.wav"
    line = one_error(run("transcribe", str(name)))
    assert "\x1b" not in line and "\u202e" not in line
    assert line.endswith("no such\\x1b[31m\\n\\u202eevil.wav"), line
    bad = run("transcribe", str(JFK), "-o", str(tmp_path / "x\x1b]0;title\x07.doc"))
    assert "x\\x1b]0;title\\x07.doc" in one_error(bad)


@pytest.mark.model
def test_progress_notes_escape_file_names(tmp_path: Path) -> None:
    """The names `transcribe` says on stdout and stderr (`==> NAME <==`, "no speech found in",
    "wrote") are escaped too; the files themselves keep their real names."""
    weird = tmp_path / "we\nird \u202e-x.wav"
    weird.write_bytes(SILENCE.read_bytes())
    out = tmp_path / "out"
    res = run("transcribe", str(JFK), str(weird), "-o", str(out), "--format", "srt")
    assert res.returncode == 0, res.stderr
    for text in (res.stdout, res.stderr):
        assert "\u202e" not in text and "we\nird" not in text, text
    assert "==> " + str(tmp_path) + "/we\\nird \\u202e-x.wav <==" in res.stdout, res.stdout
    assert "no speech found in " + str(tmp_path) + "/we\\nird \\u202e-x.wav" in res.stderr
    assert "wrote " + str(out) + "/we\\nird \\u202e-x.srt" in res.stderr, res.stderr
    assert sorted(p.name for p in out.iterdir()) == ["en_real_jfk.srt", "we\nird \u202e-x.srt"]


# --------------------------------------------------------------------------- truncated FLAC


@pytest.mark.model
def test_a_truncated_flac_gives_its_first_half(tmp_path: Path) -> None:
    """A FLAC cut at half its size gave nothing: `cannot decode ...: flac decoder lost sync`."""
    audio, rate = sf.read(JFK, dtype="float32")
    whole = tmp_path / "whole.flac"
    sf.write(whole, audio, rate)
    cut = tmp_path / "cut.flac"
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    res = run("transcribe", str(cut))
    assert res.returncode == 0, res.stderr
    assert "fellow americans" in res.stdout.lower(), res.stdout
    warnings = [x for x in res.stderr.splitlines() if "WARNING" in x]
    assert len(warnings) == 1 and "decoding stopped at" in warnings[0], res.stderr
    assert "lost sync" in warnings[0] and str(cut) in warnings[0]
