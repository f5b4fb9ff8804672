"""Issue 39, item 5: an openai-whisper command line works with `streamcap transcribe` (its
underscored flags, its switches with a value, ``-f tsv``), what has no counterpart is refused in
one line that says why, and ``transcribe -`` reads standard input (raw PCM and a container)
through a real pipe. Real subprocesses; the bundled model on tests/data's JFK clip."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
import srt
from clikit import ROOT, run

DATA = ROOT / "tests" / "data"
JFK = DATA / "en_real_jfk.wav"
COMMAND = [sys.executable, "-m", "streamcap.cli", "transcribe"]


def transcribe(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return run("transcribe", *args, timeout=timeout)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--beam_size", "5"], "--beam_size (openai-whisper's): streamcap decodes greedily"),
        (["--temperature", "0.2"], "temperature 0 without fallback"),
        (["--best_of", "5"], "no beam search"),
        (["--model_dir", "m"], "`streamcap models` shows it"),
        (["--highlight_words", "Maybe"], "expected True or False, got 'Maybe'"),
        (["--carry_initial_prompt", "False"], "gives --prompt to every utterance"),
        (["--max_line_width", "0", "-o", "a.srt"], "must be at least 1"),
        (["--max_words_per_line", "2", "-o", "a.txt"], "--max-words-per-line: only for .srt"),
        (["--output_format", "doc"], "--format: unknown format 'doc'"),
        # whisper's spelling of streamcap's rule: highlighting needs word timestamps
        (["--word_timestamps", "False", "--highlight_words", "True", "-o", "a.srt"],
         "--highlight-words needs the word timestamps"),
        (["--rate", "16000"], "raw PCM on standard input: give - as the input"),
    ],
)  # fmt: skip
def test_whisper_flags_without_counterpart_are_refused_with_why(
    args: list[str], message: str
) -> None:
    res = transcribe(str(JFK), *args)
    assert res.returncode == 2 and "loading model" not in res.stderr
    assert "usage: streamcap transcribe" in res.stderr  # the command's usage, not the top's
    assert message in res.stderr, res.stderr


def test_help_names_the_aliases_on_one_line() -> None:
    res = run("transcribe", "--help", timeout=60)
    assert res.returncode == 0
    assert "--output_dir" not in res.stdout.split("openai-whisper's flags work too")[0]
    assert "openai-whisper's flags work too: --output_dir, --output_format" in res.stdout
    assert "--max-words-per-line N" in res.stdout and "--input-format" in res.stdout


def test_standard_input_refuses_a_terminal_and_an_empty_pipe() -> None:
    empty = subprocess.run([*COMMAND, "-"], input="", capture_output=True, text=True,
                           timeout=60, cwd=ROOT)  # fmt: skip
    assert empty.returncode == 1 and "no audio on standard input" in empty.stderr
    twice = transcribe("-", "-")
    assert twice.returncode == 2 and "can be given once" in twice.stderr


@pytest.mark.model
def test_a_whisper_command_line_writes_whispers_files(tmp_path: Path) -> None:
    """As a whisper user types it: underscores, switches with values, ``-f all`` with tsv."""
    out = tmp_path / "whisper_out"  # no suffix: a folder, as whisper's --output_dir is
    res = transcribe(
        str(JFK), "--model", "base", "--language", "en", "--output_dir", str(out),
        "--output_format", "all", "--max_line_width", "20", "--max_line_count", "1",
        "--highlight_words", "True", "--word_timestamps", "True", "--fp16", "False",
        "--initial_prompt", "President Kennedy's inaugural address.", timeout=300,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert "(cpu, fp32)" in res.stderr  # --fp16 False: fp32, as whisper computes then
    names = sorted(p.name for p in out.iterdir())
    assert names == sorted(f"en_real_jfk.{k}" for k in
                           ("srt", "vtt", "jsonl", "txt", "json", "md", "tsv"))  # fmt: skip
    rows = list(csv.reader(io.StringIO((out / "en_real_jfk.tsv").read_text()), delimiter="\t"))
    assert rows[0] == ["start", "end", "text"] and len(rows) >= 2
    segments = json.loads((out / "en_real_jfk.json").read_text())["segments"]
    assert [(int(a), int(b), t) for a, b, t in rows[1:]] == [
        (round(s["start"] * 1000), round(s["end"] * 1000), s["text"].strip()) for s in segments
    ]
    assert "ask not what your country can do for you" in rows[1][2].lower()
    subs = list(srt.parse((out / "en_real_jfk.srt").read_text()))
    plain = [s.content.replace("<u>", "").replace("</u>", "") for s in subs]
    assert all("\n" not in x and len(x) <= 20 for x in plain)
    assert any("<u>" in s.content for s in subs) and all(s.end > s.start for s in subs)


@pytest.mark.model
@pytest.mark.parametrize("kind", ["raw", "wav"])
def test_transcribe_reads_standard_input(tmp_path: Path, kind: str) -> None:
    """Through a real pipe from ffmpeg: raw PCM (22.05 kHz stereo s16le, described by flags)
    or a WAV container (which says its own layout, its length unknown in a pipe)."""
    if kind == "raw":
        fmt, flags = (
            ["-f", "s16le", "-ar", "22050", "-ac", "2"],
            ["--rate", "22050", "--channels", "2"],
        )
    else:
        fmt, flags = ["-f", "wav"], []
    producer = subprocess.Popen(
        ["ffmpeg", "-v", "error", "-i", str(JFK), *fmt, "-"], stdout=subprocess.PIPE
    )
    try:
        res = subprocess.run(
            [*COMMAND, "-", "--language", "en", "-o", str(tmp_path), "-f", "txt,tsv", *flags],
            stdin=producer.stdout, capture_output=True, text=True, timeout=300, cwd=ROOT,
        )  # fmt: skip
    finally:
        assert producer.stdout is not None
        producer.stdout.close()
        producer.wait(30)
    assert res.returncode == 0, res.stderr
    assert "ask not what your country can do for you" in res.stdout.lower()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["stdin.tsv", "stdin.txt"]
    assert "fellow Americans" in (tmp_path / "stdin.txt").read_text()
    assert not list(Path(sys.modules["tempfile"].gettempdir()).glob("streamcap-stdin-*"))
