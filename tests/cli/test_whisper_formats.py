"""`streamcap transcribe` writes what openai-whisper's users expect: ``-f json`` in its schema,
``--highlight-words`` / ``--max-line-width`` / ``--max-line-count`` subtitles (read back by
the `srt` and `webvtt-py` parsers), a JSONL without wire-only fields, and ``wrote PATH`` for
each file. Real subprocesses, the bundled model, real speech from tests/data."""

from __future__ import annotations

import io
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import srt
import webvtt

DATA = Path(__file__).resolve().parents[1] / "data"
ROOT = Path(__file__).resolve().parents[2]
JFK = DATA / "en_real_jfk.wav"
READER = DATA / "en_real_librivox_0870.wav"
WIDTH = 30
#: all, as `-o DIR` writes them by default
KINDS = ("srt", "vtt", "jsonl", "txt", "json", "md", "tsv")


def run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streamcap.cli", "transcribe", *args],
        capture_output=True, text=True, timeout=timeout, cwd=ROOT,
    )  # fmt: skip


@pytest.fixture(scope="module")
def out(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """Two files into a folder, every format, one line per cue, each word underlined."""
    folder = tmp_path_factory.mktemp("whisper") / "subs"
    res = run(str(JFK), str(READER), "--language", "en", "-o", str(folder), "--highlight-words",
              "--max-line-width", str(WIDTH), "--max-line-count", "1")  # fmt: skip
    assert res.returncode == 0, res.stderr
    return folder, res


def stems() -> list[str]:
    return [JFK.stem, READER.stem]


@pytest.mark.model
def test_every_file_is_named_once_written(out: tuple[Path, Any]) -> None:
    folder, res = out
    wrote = [line for line in res.stderr.splitlines() if line.startswith("wrote ")]
    assert wrote == [f"wrote {folder / f'{s}.{k}'}" for s in stems() for k in KINDS]
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        f"{s}.{k}" for s in stems() for k in KINDS
    )


@pytest.mark.model
@pytest.mark.parametrize("stem", stems())
def test_json_is_openai_whisper_schema(out: tuple[Path, Any], stem: str) -> None:
    """The keys and types of whisper's `transcribe()` result, as its WriteJSON dumps it."""
    doc = json.loads((out[0] / f"{stem}.json").read_text(encoding="utf-8"))
    assert set(doc) == {"text", "segments", "language"} and doc["language"] == "en"
    segments = doc["segments"]
    assert segments and [s["id"] for s in segments] == list(range(len(segments)))
    keys = {"id", "seek", "start", "end", "text", "tokens", "temperature", "avg_logprob",
            "compression_ratio", "no_speech_prob", "words"}  # fmt: skip
    for s in segments:
        assert set(s) == keys, s.keys()
        # the window's frame (its final's start); the segment, from its first word (issue 39)
        assert 0 <= s["start"] < s["end"] and s["seek"] <= round(s["start"] * 100)
        assert s["text"].startswith(" ") and s["text"].strip()  # as the tokens spell it
        assert s["tokens"] and all(isinstance(t, int) for t in s["tokens"])
        assert -1.5 <= s["avg_logprob"] <= 0 and 0 <= s["no_speech_prob"] < 0.6
        assert s["compression_ratio"] > 0 and s["temperature"] == 0.0
        words = s["words"]
        assert {tuple(w) for w in words} == {("word", "start", "end", "probability")}
        assert all(w["word"].startswith(" ") for w in words)  # whisper keeps the space
        assert "".join(w["word"] for w in words) == s["text"]
        assert all(0 <= w["probability"] <= 1 and w["start"] <= w["end"] for w in words)
        assert (s["start"], s["end"]) == (words[0]["start"], words[-1]["end"])
    assert doc["text"] == "".join(s["text"] for s in segments)
    starts = [s["start"] for s in segments]
    assert starts == sorted(starts)
    if stem == JFK.stem:
        assert "ask not what your country can do for you" in doc["text"].lower()


@pytest.mark.model
@pytest.mark.parametrize("stem", stems())
def test_file_jsonl_has_no_wire_fields_and_bare_words(out: tuple[Path, Any], stem: str) -> None:
    rows = [json.loads(x) for x in (out[0] / f"{stem}.jsonl").read_text().splitlines()]
    segments = json.loads((out[0] / f"{stem}.json").read_text())["segments"]
    assert len(rows) == len(segments)
    for row, s in zip(rows, segments, strict=True):
        assert set(row) == {"type", "segment", "text", "start", "end", "words"}, row.keys()
        # the final's span (the voice detector's) holds its words' (whisper's segment bounds)
        assert row["text"] == s["text"].strip()
        assert row["start"] <= s["start"] <= s["end"] <= row["end"]
        assert [w["word"] for w in row["words"]] == [w["word"].strip() for w in s["words"]]
        assert all(w["word"] == w["word"].strip() and w["word"] for w in row["words"])
        assert [w["start"] for w in row["words"]] == [w["start"] for w in s["words"]]


TAG = re.compile(r"</?u>")


@pytest.mark.model
@pytest.mark.parametrize("stem", stems())
def test_highlighted_subtitles_as_whisper_writes_them(out: tuple[Path, Any], stem: str) -> None:
    """One line of at most WIDTH characters per cue; a cue per word with just that word in
    <u>...</u> over the word's own time, the plain cue text over the gaps; SRT and WebVTT say
    the same (each read back by its own parser)."""
    folder = out[0]
    subs = list(srt.parse((folder / f"{stem}.srt").read_text(encoding="utf-8")))
    vtt = list(webvtt.from_buffer(io.StringIO((folder / f"{stem}.vtt").read_text())))
    assert [s.content for s in subs] == [c.raw_text for c in vtt]
    ms = [
        (round(s.start.total_seconds() * 1000), round(s.end.total_seconds() * 1000)) for s in subs
    ]
    assert ms == [(c.start_time.in_milliseconds(), c.end_time.in_milliseconds()) for c in vtt]
    assert all(a <= b for a, b in ms) and all(ms[i][1] <= ms[i + 1][0] for i in range(len(ms) - 1))
    words = [w for s in json.loads((folder / f"{stem}.json").read_text())["segments"]
             for w in s["words"]]  # fmt: skip
    underlined: list[tuple[str, int, int]] = []
    shown: list[str] = []  # each cue's text, once per run of cues that show it
    for s, (a, b) in zip(subs, ms, strict=True):
        plain = TAG.sub("", s.content)
        assert "\n" not in plain and len(plain) <= WIDTH, s.content
        if not shown or shown[-1] != plain:
            shown.append(plain)
        marks = re.findall(r"<u>(.*?)</u>", s.content)
        assert len(marks) <= 1, s.content
        if marks:
            underlined.append((marks[0], a, b))
    assert [u[0] for u in underlined] == [w["word"].strip() for w in words]
    for (_, a, b), w in zip(underlined, words, strict=True):
        # the word's own time (clamped into its cue's span: never before the previous word)
        assert b == round(w["end"] * 1000) or b == a, (a, b, w)
        assert a >= round(w["start"] * 1000) - 1, (a, w)
    text = " ".join(s["text"].strip() for s in json.loads((folder / f"{stem}.json").read_text())
                    ["segments"])  # fmt: skip
    assert " ".join(shown).split() == text.split()


@pytest.mark.model
def test_txt_is_the_transcript(out: tuple[Path, Any]) -> None:
    folder, res = out
    txt = (folder / f"{JFK.stem}.txt").read_text()
    assert "fellow Americans" in txt and "<u>" not in txt


# --------------------------------------------------------------------------- fast refusals


def test_same_stems_are_all_named_in_one_error_before_loading(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    one, two = tmp_path / "a" / "talk.wav", tmp_path / "b" / "talk.wav"
    shutil.copy(JFK, one)
    shutil.copy(JFK, two)
    res = run(str(one), str(two), "-o", str(tmp_path / "subs"), "-f", "srt,json", timeout=60)
    assert res.returncode != 0
    [line] = [x for x in res.stderr.splitlines() if x.strip()]
    assert "loading model" not in res.stderr
    for name in ("talk.srt", "talk.json"):
        assert str(tmp_path / "subs" / name) in line
    assert f"{one} and {two}" in line and "each caption file needs its own name" in line


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--highlight-words", "--no-word-timestamps", "-o", "a.srt"], "needs the word timestamps"),
        (["--highlight-words"], "--highlight-words: only for .srt or .vtt outputs"),
        (["--max-line-width", "20", "-o", "a.txt"], "--max-line-width: only for .srt or .vtt"),
        (["--max-line-count", "0", "-o", "a.srt"], "must be at least 1"),
        (["--live", "-o", "a.json"], "only offline transcription has (not --live)"),
        (["--live", "-f", "json"], "--format json: openai-whisper's JSON"),
        (["-o", "a.doc"], "must end in .srt, .vtt, .jsonl, .txt, .json, .md or .tsv"),
    ],
)
def test_whisper_flags_refused_before_loading(args: list[str], message: str) -> None:
    res = run(str(JFK), *args, timeout=60)
    assert res.returncode != 0 and "loading model" not in res.stderr
    assert message in res.stderr, res.stderr
