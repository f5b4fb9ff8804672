"""The `streamcap` command as a new user runs it: real subprocesses, the real bundled model,
real audio from tests/data. Only the sound card is faked away (no-sound-card environment)."""

from __future__ import annotations

import importlib.metadata
import json
import os
import pty
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from clikit import ROOT, SRT_CUE, parse_srt, run  # noqa: F401 - others import them from here

DATA = Path(__file__).resolve().parents[1] / "data"
JFK = DATA / "en_real_jfk.wav"
SILENCE = DATA / "sv_real_silence_u0016001.wav"
LOADING = "loading model"


def last_line(res: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    return lines[-1] if lines else ""


# --------------------------------------------------------------------------- offline, real model


def test_transcribe_writes_text_and_subtitles(tmp_path: Path) -> None:
    srt, vtt, jsonl = tmp_path / "a.srt", tmp_path / "a.vtt", tmp_path / "a.jsonl"
    # a video file with an AAC track at 44.1 kHz stereo: exercises PyAV and resampling
    import soundfile as sf
    from audiokit import encode

    audio, _ = sf.read(JFK, dtype="float32")
    mp4 = encode(audio, tmp_path / "jfk.mp4", "mp4", "aac", 44100, "stereo", video=True)
    res = run("transcribe", str(mp4), "--language", "en", "-o", str(srt), "-o", str(vtt),
              "-o", str(jsonl), "--timestamps")  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert LOADING in res.stderr  # model loading says so
    assert "ask not what your country can do for you" in res.stdout.lower()
    assert res.stdout.startswith("[00:00.")
    cues = parse_srt(srt.read_text())
    assert cues and cues[0][1].startswith("00:00:0")
    assert vtt.read_text().startswith("WEBVTT\n\n")
    events = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert events and all(e["type"] == "final" for e in events)
    assert events[-1]["end"] == pytest.approx(11.0, abs=0.6)
    # a file's JSONL has none of the wire's bookkeeping (who sent it, in which order, how late)
    assert not any({"stream", "seq", "committed_chars", "latency_ms"} & set(e) for e in events)
    # ... and carries its words, timed in the file (tests/decoding/test_alignment.py: the times)
    for e in events:
        assert [w["word"] for w in e["words"]] == e["text"].split()  # no leading spaces
        assert e["start"] <= e["words"][0]["start"] <= e["words"][-1]["end"] <= e["end"]


def _read_pty(fd: int, into: list[bytes]) -> None:
    while True:
        try:
            data = os.read(fd, 4096)
        except OSError:
            return
        if not data:
            return
        into.append(data)


def test_several_files_into_a_folder_with_progress_on_a_terminal(tmp_path: Path) -> None:
    """Two files and a folder + --format (openai-whisper's layout); --language by name;
    stderr on a terminal shows a progress bar for the 11 s file."""
    out = tmp_path / "subs"
    other = DATA / "en_real_librivox_0870.wav"
    master, slave = pty.openpty()
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "120"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamcap.cli", "transcribe", str(JFK), str(other),
         "--language", "English", "-o", str(out), "--format", "srt,vtt,jsonl"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=slave, text=True,
    )  # fmt: skip
    os.close(slave)
    terminal: list[bytes] = []
    reader = threading.Thread(target=_read_pty, args=(master, terminal), daemon=True)
    reader.start()
    stdout, _ = proc.communicate(timeout=300)
    reader.join(10)
    os.close(master)
    shown = b"".join(terminal).decode(errors="replace")
    assert proc.returncode == 0, shown
    assert LOADING in shown
    assert "en_real_jfk.wav" in shown and "%" in shown  # the bar, with the file's name
    assert sorted(p.name for p in out.iterdir()) == sorted(
        f"{stem}.{ext}" for stem in ("en_real_jfk", "en_real_librivox_0870")
        for ext in ("srt", "vtt", "jsonl")
    )  # fmt: skip
    assert f"==> {JFK} <==" in stdout and f"==> {other} <==" in stdout
    assert "fellow americans" in parse_srt((out / "en_real_jfk.srt").read_text())[0][3].lower()
    librivox = parse_srt((out / "en_real_librivox_0870.srt").read_text())
    assert "dashwood" in " ".join(c[3] for c in librivox).lower()
    assert not any(c[3].endswith(("Mr.", "Mr")) for c in librivox)  # no cue cut after "Mr."
    assert (out / "en_real_librivox_0870.vtt").read_text().startswith("WEBVTT")


def test_silence_is_not_an_error(tmp_path: Path) -> None:
    srt, vtt = tmp_path / "s.srt", tmp_path / "s.vtt"
    res = run("transcribe", str(SILENCE), "-o", str(srt), "-o", str(vtt))
    assert res.returncode == 0, res.stderr
    assert res.stdout == ""
    assert srt.read_text() == "" and vtt.read_text() == "WEBVTT\n\n"  # valid, empty
    notes = [line for line in res.stderr.splitlines() if line.strip()]
    assert notes[-2:] == [f"wrote {srt}", f"wrote {vtt}"]  # empty, but written: said so
    assert "no speech found" in notes[-3] and "error" not in notes[-3]


def _long_speech(path: Path) -> float:
    """~130 s of real speech: the test clips four times over, with pauses between them (long
    enough that the Ctrl-C lands while windows are still being decoded, on a fast CPU too)."""
    import soundfile as sf

    clips = [sf.read(p, dtype="float32")[0] for p in sorted(DATA.glob("en_*.wav"))]
    gap = np.zeros(8000, np.float32)
    audio = np.concatenate([x for _ in range(4) for c in clips for x in (c, gap)])
    sf.write(path, audio, 16000)
    return len(audio) / 16000


def test_ctrl_c_keeps_valid_subtitles_with_everything_so_far(tmp_path: Path) -> None:
    wav = tmp_path / "long.wav"
    assert _long_speech(wav) > 120
    srt, vtt, jsonl = tmp_path / "l.srt", tmp_path / "l.vtt", tmp_path / "l.jsonl"
    whisper = tmp_path / "l.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamcap.cli", "transcribe", str(wav), "--language", "en",
         "-o", str(srt), "-o", str(vtt), "-o", str(jsonl), "-o", str(whisper)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None:
            if srt.exists() and SRT_CUE.search(srt.read_text()):
                break  # the first cue is on disk while the rest is still being decoded
            time.sleep(0.2)
        assert proc.poll() is None, proc.communicate()[1]
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, stderr
    assert "interrupted" in stderr and "Traceback" not in stderr
    cues = parse_srt(srt.read_text())
    finals = [json.loads(x) for x in jsonl.read_text().splitlines()]
    assert cues and finals
    assert finals[-1]["end"] < 60  # stopped early: what was done, not the whole file
    assert " ".join(c[3] for c in cues).split() == " ".join(f["text"] for f in finals).split()
    assert stdout.splitlines() == [f["text"] for f in finals]  # printed as decoded
    assert vtt.read_text().startswith("WEBVTT\n\n") and "-->" in vtt.read_text()
    # one JSON document, rewritten after each final: whole, with every final so far
    segments = json.loads(whisper.read_text())["segments"]
    assert [s["text"].strip() for s in segments] == [f["text"] for f in finals]


# --------------------------------------------------------------------------- live, real model


def test_transcribe_live_says_it_loads_the_model(tmp_path: Path) -> None:
    out = tmp_path / "live.srt"
    res = run("transcribe", str(JFK), "--live", "--language", "english",
              "--partial-interval", "2", "--no-partials", "-o", str(out))  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert res.stderr.lstrip().startswith(LOADING)
    assert "FINAL" in res.stdout and "partial" not in res.stdout
    assert "country" in " ".join(c[3] for c in parse_srt(out.read_text())).lower()


# --------------------------------------------------------------------------- fast failures


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["transcribe", "/no/such.wav"], "not found"),
        (["transcribe", "{empty}"], "empty file"),
        (["transcribe", "{corrupt}"], "cannot decode"),
        (["transcribe", str(JFK), "-o", "x.doc"], "must end in"),
        (["transcribe", str(JFK), "-o", "/nonexistent/dir/x.srt"], "does not exist"),
        (["transcribe", str(JFK), "-o", "{empty}/x.srt"], "is not a folder"),
        (["transcribe", str(JFK), "-o", "{tmp}/a.srt", "-o", "{tmp}/a.srt"], "given twice"),
        (["bench", "--manifest", "/no/such.jsonl"], "cannot read --manifest"),
        (["bench", "--manifest", str(DATA / "manifest.jsonl"), "--kind", "opera"], "no utt"),
        (["serve", "--port", "0", "--tls-cert", "{empty}", "--tls-key", "{empty}"], "cannot use"),
        (["models", "--prepare", "large-v9"], "unknown bundled model"),
    ],
)
def test_bad_input_fails_at_once_in_one_line(args: list[str], message: str, tmp_path: Path) -> None:
    """Caught before the model loads: no "loading model", exit 1, `streamcap X: error: ...`."""
    empty = tmp_path / "empty.wav"
    empty.write_bytes(b"")
    corrupt = tmp_path / "corrupt.mp3"
    corrupt.write_bytes(b"\x00garbage" * 100)
    args = [a.format(empty=empty, corrupt=corrupt, tmp=tmp_path) for a in args]
    res = run(*args, timeout=120)
    assert res.returncode == 1, res.stderr
    assert LOADING not in res.stderr and "Traceback" not in res.stderr
    assert res.stderr.strip().splitlines() == [last_line(res)]
    assert last_line(res).startswith(f"streamcap {args[0]}: error: ")
    assert message in last_line(res), res.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["transcribe", "/missing.wav", "--model", "tiny.en"], "not found"),  # before loading
        (["transcribe", str(JFK), "--model", "large-v9"], "unknown model"),
        (["transcribe", str(JFK), "--model", "org/whisper-x"], "not reachable"),
    ],
)
def test_bad_model_is_one_clear_line(args: list[str], message: str) -> None:
    """No sockets leave this machine; the hub-id case relies on that (it must fail fast)."""
    res = run(*args, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert res.returncode == 1
    assert "Traceback" not in res.stderr
    assert last_line(res).startswith("streamcap transcribe: error: ")
    assert message in last_line(res), res.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["transcribe", str(JFK), "--clock", "real"], "--clock: only with --live"),
        (["transcribe", str(JFK), "--partial-interval", "2"], "only with --live"),
        (["transcribe", str(JFK), "--no-partials", "--chunk", "1"], "--chunk, --no-partials:"),
        (["transcribe", str(JFK), "--live", "--condition-on-previous"], "not used by --live"),
        (["transcribe", str(JFK), "--live", "--no-word-timestamps"], "not used by --live"),
        (["transcribe", str(JFK), str(JFK), "--live"], "one file at a time"),
        (["transcribe", str(JFK), str(SILENCE), "-o", "a.srt"], "-o takes a folder"),
        (["transcribe", str(JFK), "--format", "srt", "-o", "a.srt"], "output folder"),
        (["transcribe", str(JFK), "--format", "doc"], "unknown format 'doc'"),
        (["transcribe", str(JFK), "--language", "englsh"], "did you mean 'en' (english)?"),
        (["transcribe", str(JFK), "--language", "xx"], "unknown language 'xx': use a code"),
        (["transcribe", str(JFK), "--device", "tpu"], "not a compute device"),
        (["transcribe"], "the following arguments are required: FILE"),
        (["dictate", "--device", "USB Mic"], "the microphone of `dictate` is --mic"),
        (["serve", "--max-streams", "0"], "must be at least 1"),
        (["serve", "--port", "0", "--tls-cert", "/x.pem"], "go together"),
        (["serve", "--port", "99999"], "--port"),
        (["bench"], "--manifest"),
    ],
)
def test_usage_errors_name_the_command(args: list[str], message: str) -> None:
    res = run(*args, timeout=120)
    assert res.returncode == 2, res.stderr
    assert res.stderr.startswith(f"usage: streamcap {args[0]}")
    assert last_line(res).startswith(f"streamcap {args[0]}: error: "), res.stderr
    assert message in last_line(res), res.stderr
    assert LOADING not in res.stderr


def test_unknown_language_lists_the_codes() -> None:
    res = run("transcribe", str(JFK), "--language", "klingon")
    assert res.returncode == 2
    assert "en, zh, de, es" in last_line(res) and "yue" in last_line(res)


def test_serve_refuses_a_port_in_use_before_loading_the_model() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        res = run("serve", "--port", str(port), timeout=120)
    assert res.returncode == 1, res.stderr
    assert LOADING not in res.stderr and "Traceback" not in res.stderr
    assert last_line(res) == (
        f"streamcap serve: error: port {port} on 127.0.0.1 is already in use (another "
        "streamcap serve?): pick another with --port, or --port 0 for any free one"
    )


def _no_sound_card_env(tmp_path: Path) -> dict[str, str]:
    """No PulseAudio server and no ALSA card here: the test says so (hardware that is missing)."""
    cards = Path("/proc/asound/cards")
    if cards.exists() and "no soundcards" not in cards.read_text():
        pytest.skip("this machine has a real sound card")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PULSE_", "XDG_RUNTIME"))}
    env.update(PULSE_SERVER=f"unix:{tmp_path}/no-such-server", XDG_RUNTIME_DIR=str(tmp_path))
    return env


def test_dictate_device_is_the_compute_device(tmp_path: Path) -> None:
    """`--device cuda` no longer names a microphone: without a sound card the answer is about
    the microphone, not "no input device matches 'cuda'"."""
    res = run("dictate", "--device", "cuda", env=_no_sound_card_env(tmp_path), timeout=120)
    assert res.returncode == 1
    assert "cuda" not in res.stderr and "no microphone" in last_line(res)
    assert last_line(res).startswith("streamcap dictate: error: ")


def test_cuda_without_a_gpu_is_one_line() -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA GPU")
    res = run("transcribe", str(JFK), "--device", "cuda", timeout=120)
    assert res.returncode == 1
    assert res.stderr.strip() == (
        "streamcap transcribe: error: --device cuda was asked for but no CUDA GPU is available"
    )


# --------------------------------------------------------------------------- help and version


def test_version() -> None:
    res = run("--version", timeout=60)
    assert res.returncode == 0
    assert res.stdout == f"streamcap {importlib.metadata.version('streamcap')}\n"


def _command_parsers() -> dict[str, Any]:
    import argparse

    from streamcap.cli import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command")
    assert isinstance(sub, argparse._SubParsersAction)
    return dict(sub.choices)


def test_every_flag_has_help_and_shows_its_default() -> None:
    import argparse

    from streamcap.cli.parser import HelpFormatter

    for name, p in _command_parsers().items():
        p.format_help()  # adds the command's flags
        formatter = HelpFormatter(p.prog)
        for action in p._actions:
            if action.help == argparse.SUPPRESS or not action.option_strings:
                continue
            flag = f"{name} {action.option_strings[-1]}"
            assert action.help, f"{flag} has no help"
            if action.nargs != 0 and not action.required:  # a value: its default is on show
                assert "default" in formatter._get_help_string(action), flag
    serve = _command_parsers()["serve"].format_help()
    assert "--max-streams N       publishers at once (default: 8)" in serve


def test_bench_help_explains_the_manifest() -> None:
    res = run("bench", "--help", timeout=60)
    assert res.returncode == 0
    for words in ("JSONL", "one JSON object per line", '"id"', "relative to the manifest",
                  "lang", "kind", "duration"):  # fmt: skip
        assert words in res.stdout, words


def test_help_imports_no_model_code() -> None:
    """`--help` of every command without torch or transformers (what made it take seconds;
    the time itself is measured by scripts/bench_cli_help.py)."""
    code = (
        "import sys\n"
        "from streamcap.cli import build_parser\n"
        "sub = next(a for a in build_parser()._actions if a.dest == 'command')\n"
        "for p in sub.choices.values(): p.format_help()\n"
        "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "[]"


def test_models_never_cuts_the_cache_path(tmp_path: Path) -> None:
    cache = tmp_path / ("a-rather-long-folder-name-for-the-model-cache" * 2)
    env = {**os.environ, "STREAMCAP_CACHE": str(cache), "COLUMNS": "40"}
    res = run("models", env=env, timeout=60)
    assert res.returncode == 0, res.stderr
    assert "base" in res.stdout and "tiny.en" in res.stdout
    lines = res.stdout.splitlines()
    assert f"cache: {cache}" in lines
    assert any(line.endswith(str(cache / "models" / "whisper-base-v1")) for line in lines)


# --------------------------------------------------------------------------- pieces


def test_language_table_is_whispers() -> None:
    from transformers.models.whisper.tokenization_whisper import LANGUAGES, TO_LANGUAGE_CODE

    from streamcap.cli.languages import ALIASES
    from streamcap.cli.languages import LANGUAGES as OURS

    assert OURS == LANGUAGES
    assert {**{v: k for k, v in OURS.items()}, **ALIASES} == TO_LANGUAGE_CODE


def test_resolve_language() -> None:
    from streamcap.cli.languages import resolve_language
    from streamcap.errors import UserError

    assert resolve_language("English") == "en"
    assert resolve_language(" EN ") == "en"
    assert resolve_language("haitian creole") == "ht"
    assert resolve_language("Mandarin") == "zh"
    assert resolve_language(None) is None
    with pytest.raises(UserError, match="did you mean 'de' \\(german\\)"):
        resolve_language("germna")


def test_only_user_errors_become_one_line() -> None:
    """Everything else is a bug and keeps its traceback (main re-raises it)."""
    from streamcap.audio import AudioError, NoMicrophoneError
    from streamcap.errors import UserError, user_message
    from streamcap.models.registry import ModelNotFoundError

    assert user_message(UserError("bad\n  flag")) == "bad flag"
    assert user_message(AudioError("cannot decode x")) == "cannot decode x"
    assert user_message(NoMicrophoneError("no microphone")) == "no microphone"
    assert user_message(ModelNotFoundError("unknown model 'x'")) == "unknown model 'x'"
    for bug in (ValueError("x"), OSError(2, "No such file"), KeyError("k"), TypeError("t")):
        assert user_message(bug) is None
