"""Frictions a new user met (issue 23), each through the real `streamcap` command.

Subprocesses run `python -m streamcap.cli` with real arguments, the bundled tiny.en model and
the clips in tests/data. One stand-in, said where it is: jiwer hidden from the import system
(``sys.modules["jiwer"] = None``) to be the machine where the `bench` extra is not installed.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
GPU_NODES = ("/dev/nvidiactl", "/proc/driver/nvidia", "/dev/kfd", "/dev/dxg")


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streamcap.cli", *args],
        capture_output=True, text=True, timeout=300, cwd=ROOT, env=env,
    )  # fmt: skip


def run_main(argv: list[str], before: str = "") -> subprocess.CompletedProcess[str]:
    """`streamcap.cli.main(argv)` in a fresh interpreter, which then prints on its last stderr
    line which heavy modules the command imported."""
    code = (
        f"import sys\n{before}\nfrom streamcap.cli import main\n"
        f"try:\n    rc = main({argv!r})\nexcept SystemExit as e:\n    rc = e.code\n"
        "heavy = sorted(m for m in ('torch', 'numpy', 'transformers') if m in sys.modules)\n"
        "print('imported:', ','.join(heavy), file=sys.stderr)\n"
        "sys.exit(rc)\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT
    )


def test_streamcap_alone_prints_the_help() -> None:
    res = run()
    assert res.returncode == 0, res.stderr
    assert res.stderr == ""
    assert res.stdout.startswith("usage: streamcap ")
    for command in ("transcribe", "dictate", "serve", "demo", "bench", "models"):
        assert re.search(rf"^\s+{command}\s+\S", res.stdout, re.M), command


def test_models_table_fits_80_columns_and_lists_without_torch(tmp_path: Path) -> None:
    env = {**os.environ, "COLUMNS": "80", "STREAMCAP_CACHE": str(tmp_path)}
    res = run("models", env=env)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    table = lines[: next(i for i, line in enumerate(lines) if line.startswith("("))]
    assert all(len(line) <= 80 for line in table), table
    # one line per model: name, description and state unwrapped
    assert any(
        re.match(r"base\s+Whisper base, multilingual, 74 M parameters\s+\S", x) for x in table
    )
    assert any(
        re.match(r"tiny\.en\s+Whisper tiny\.en, English only, 39 M parameters", x) for x in table
    )
    assert any("not prepared yet" in x for x in table)  # an empty cache
    if any(os.path.exists(p) for p in GPU_NODES):
        pytest.skip("a GPU driver is here: `models` asks torch about CUDA, as it should")
    listed = run_main(["models"])
    assert listed.returncode == 0, listed.stderr
    # the 2.5 s were torch, imported to hear "no CUDA"
    assert listed.stderr.splitlines()[-1] == "imported: "


def test_models_into_a_closed_pipe_is_quiet() -> None:
    res = subprocess.run(
        f"{sys.executable} -m streamcap.cli models | head -n 1",
        shell=True, capture_output=True, text=True, timeout=60, cwd=ROOT,
    )  # fmt: skip
    assert res.stdout.startswith("model ") and "Traceback" not in res.stderr, res.stderr


@pytest.mark.parametrize(
    "argv",
    [
        ["serve", "--model", "small", "--port", "0"],
        ["dictate", "--model", "small"],
        ["demo", "--model", "small"],
        ["transcribe", str(DATA / "en_real_jfk.wav"), "--model", "small"],
        ["bench", "--manifest", str(DATA / "manifest.jsonl"), "--model", "small"],
        ["serve", "--assistant", "small"],
    ],
)
def test_an_openai_whisper_name_is_caught_before_loading(argv: list[str]) -> None:
    res = run_main(argv)
    assert res.returncode == 1
    *lines, imported = res.stderr.splitlines()
    assert lines == [
        f"streamcap {argv[0]}: error: unknown model 'small': its hub id is openai/whisper-small "
        "(--model openai/whisper-small, downloaded on first use); bundled: base, tiny.en"
    ]
    assert "torch" not in imported  # caught before any model code: no load, no 3.5 s


def test_bench_without_jiwer_says_which_extra() -> None:
    res = run_main(
        ["bench", "--manifest", str(DATA / "manifest.jsonl"), "--model", "tiny.en"],
        before="sys.modules['jiwer'] = None  # stand-in: the bench extra not installed",
    )
    assert res.returncode == 1
    assert res.stderr.splitlines()[0] == (
        "streamcap bench: error: the jiwer package is needed for the WER columns: "
        "pip install 'streamcap[bench]'"
    )
    assert "torch" not in res.stderr.splitlines()[-1]  # before the model loads


def _columns(line: str) -> list[str]:
    return re.split(r"\s{2,}", line.strip())


@pytest.mark.model
def test_bench_comparison_headers_stay_apart() -> None:
    """int8 alone: its long name (int8-encoder+fp32-decoder) is the comparison's base, which
    ran into the neighbouring headers; every header now sits over its own column."""
    res = run(
        "bench", "--manifest", str(DATA / "manifest.jsonl"), "--model", "tiny.en", "--limit",
        "1", "--step", "0", "--precision", "int8", "--threads", "1",
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    lines = res.stdout.splitlines()
    for first in ("precision  ", "engine  "):  # the tables, not "precision int8 on cpu"
        i = next(n for n, line in enumerate(lines) if line.startswith(first))
        header, row = lines[i], lines[i + 1]
        assert len(_columns(header)) == len(_columns(row)), (header, row)
        # right-aligned columns: each header ends where its column's cells end
        ends = [m.end() for m in re.finditer(r"\S+(?: \S+)*", header)][1:]
        cell_ends = [m.end() for m in re.finditer(r"\S+(?: \S+)*", row)][1:]
        assert ends == cell_ends, (header, row)
    assert "int8-encoder+fp32-decoder" in res.stdout


@pytest.mark.model
def test_demo_names_keep_serving_and_speaks_as_demo() -> None:
    sample = str(DATA / "en_real_goforward.wav")
    res = run(
        "demo", "--model", "tiny.en", "--sample", sample, "--threads", "1", "--precision", "fp32"
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert "--keep-serving" in res.stdout and "server stopped" in res.stdout, res.stdout
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamcap.cli", "demo", "--model", "tiny.en", "--sample",
         sample, "--threads", "1", "--precision", "fp32", "--keep-serving"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if "still serving" in line:
                break
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert "streamcap demo: shutting down" in err and "streamcap serve" not in err, err
