"""The live pipeline end to end: real model, real audio, real (virtual) microphone.

- `transcribe --live` on the simulated clock, in a subprocess, as a user runs it;
- `LiveStream` in process: finals exact (plain greedy on the same audio), silence gives nothing,
  two streams share one worker thread on the real clock;
- `dictate` through a PulseAudio virtual microphone (a real device path), stopped with Ctrl-C,
  and with no sound card at all.
"""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import jiwer
import numpy as np
import pytest
from pulse_mic import PulseMic

from streamcap.audio import load_audio
from streamcap.core.captions import Caption, CaptionLog
from streamcap.core.live_config import LiveConfig
from streamcap.core.text import norm_text
from streamcap.runtime.clock import RealClock, SimulatedClock
from streamcap.runtime.jobs import DecodeJob, JobOutcome
from streamcap.runtime.replay import replay
from streamcap.runtime.stream import LiveStream
from streamcap.runtime.worker import InferenceWorker

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
SR = 16000
MANIFEST = {
    json.loads(line)["id"]: json.loads(line)
    for line in (DATA / "manifest.jsonl").read_text().splitlines()
    if line.strip()
}


def wer(ref_id: str, text: str) -> float:
    return float(jiwer.wer(MANIFEST[ref_id]["text_norm"], norm_text(text) or "<empty>"))


@pytest.fixture(scope="module")
def engine():  # type: ignore[no-untyped-def]
    from streamcap.runtime.engine import Engine

    return Engine("base")


def collect(stream: LiveStream) -> list[tuple[float, Caption]]:
    """Number the stream's events into a log of our own (the sink owns the sequence)."""
    events: list[tuple[float, Caption]] = []
    sink = CaptionLog(stream.stream_id)
    stream.on_caption = lambda ev: events.append((stream.now(), sink.add(ev)))
    return events


# --------------------------------------------------------------------------- in process


@pytest.mark.model
@pytest.mark.parametrize(
    ("early", "prompt"),
    [("auto", ""), ("on", ""), ("auto", "Kennedy's inaugural address. Americans, Mary, barrel.")],
)  # early "auto" is off here (a base final costs ~1 s); a prompt must reach both decoders
def test_file_on_the_simulated_clock_gives_exact_finals(engine, early: str, prompt: str) -> None:  # type: ignore[no-untyped-def]
    from streamcap.decoding.reference import reference_decode

    jfk = load_audio(DATA / "en_real_jfk.wav")
    mary = load_audio(DATA / "en_real_praatio_mary.wav")
    noise = load_audio(DATA / "sv_real_silence_u0016001.wav")
    gap = np.zeros(2 * SR, np.float32)
    audio = np.concatenate([jfk, gap, mary, gap, noise])
    mary_end = (len(jfk) + len(gap) + len(mary)) / SR
    worker = InferenceWorker(engine)
    config = LiveConfig(language="en", early_finals=early, prompt=prompt)  # type: ignore[arg-type]
    stream = LiveStream("t", worker, None, config, SimulatedClock())
    events = collect(stream)
    decodes: list[tuple[DecodeJob, JobOutcome]] = []
    stream.decode_observer = lambda job, out: decodes.append((job, out))
    replay(stream, audio)
    finals = [c for _, c in events if c.type == "final" and c.text]
    text = " ".join(c.text for c in finals)
    assert "fellow americans" in norm_text(text) and "barrel" in norm_text(text)
    assert (
        jiwer.wer(
            MANIFEST["en_real_jfk"]["text_norm"]
            + " "
            + MANIFEST["en_real_praatio_mary"]["text_norm"],
            norm_text(text),
        )
        < 0.15
    )
    assert all(c.end <= mary_end + 0.5 for c in finals)  # nothing from the noise at the end
    assert [c.seq for _, c in events] == list(range(1, len(events) + 1))
    assert any(c.type == "partial" for _, c in events)
    for t, c in events:
        assert c.latency_ms >= 0 and 0 <= c.committed_chars <= len(c.text)
        assert t >= c.end - 1e-6  # nothing is emitted before its audio arrived
    # every final decode is exactly plain greedy on the same audio and options
    final_jobs = [(j, o) for j, o in decodes if j.kind == "final" and o.result is not None]
    assert final_jobs
    for job, out in final_jobs:
        assert out.options is not None and out.result is not None
        assert out.options.prompt_ids == (engine.text_to_ids(prompt) if prompt else ())
        enc = engine.encode(job.audio)
        ref, _ = reference_decode(engine.decoder, enc.enc, out.options, enc.duration_s)
        assert tuple(ref) == out.result.tokens
    stats = worker.stream_stats("t")
    assert stats.finals == len(final_jobs) and stats.decode.accepted > 0
    if early == "on":  # finals started at pause onset were used (voided ones ran too)
        assert stream.protocol.early_finals["used"] >= 2
        assert stream.protocol.early_finals["started"] <= len(final_jobs)


@pytest.mark.model
def test_room_noise_gives_no_caption(engine) -> None:  # type: ignore[no-untyped-def]
    noise = load_audio(DATA / "sv_real_silence_u0016001.wav")
    stream = LiveStream("n", InferenceWorker(engine), None, LiveConfig(), SimulatedClock())
    events = collect(stream)
    replay(stream, np.concatenate([noise, noise, noise]))
    assert [c.text for _, c in events if c.type == "final" and c.text] == []


@pytest.mark.model
def test_two_streams_share_one_worker_thread_in_real_time(engine) -> None:  # type: ignore[no-untyped-def]
    worker = InferenceWorker(engine).start()
    clips = {"a": "en_real_praatio_mary", "b": "en_real_goforward"}
    streams = {
        s: LiveStream(s, worker, None, LiveConfig(language="en"), RealClock()) for s in clips
    }
    events = {s: collect(st) for s, st in streams.items()}
    errors: list[BaseException] = []

    def feed(sid: str) -> None:
        try:
            audio = np.concatenate([load_audio(DATA / f"{clips[sid]}.wav"), np.zeros(SR // 2)])
            replay(streams[sid], audio.astype(np.float32), chunk_s=0.05, speed=2.0, finish=False)
            t0 = time.monotonic()
            streams[sid].finish()  # returns at once; the final follows from the worker
            assert time.monotonic() - t0 < 0.5
            assert streams[sid].wait_idle(60)
        except BaseException as e:  # reported in the main thread
            errors.append(e)

    threads = [threading.Thread(target=feed, args=(s,)) for s in clips]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    worker.stop()
    assert not errors, errors
    for sid, clip in clips.items():
        finals = [c for _, c in events[sid] if c.type == "final"]
        assert finals and all(c.stream == sid for c in finals)
        assert wer(clip, " ".join(c.text for c in finals)) <= 0.25
    with pytest.raises(RuntimeError):
        streams["a"].feed(np.zeros(160, np.float32))
    assert worker.total_stats().streams == 2


# --------------------------------------------------------------------------- command line


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 240) -> Any:
    return subprocess.run(
        [sys.executable, "-m", "streamcap.cli", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.model
def test_transcribe_live_command(tmp_path: Path) -> None:
    out = tmp_path / "captions.srt"
    proc = run_cli(
        "transcribe", str(DATA / "en_real_librivox_0870.wav"), "--live", "--language", "en",
        "--clock", "simulated", "--output", str(out), "-o", str(tmp_path / "c.jsonl"),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = re.compile(r"^\[\s*([\d.]+)s\] (partial|FINAL)\s+#(\d+)\s+([\d.]+)-\s*([\d.]+)  (.*)$")
    rows = [m.groups() for m in map(line.match, proc.stdout.splitlines()) if m]
    kinds = [r[1] for r in rows]
    assert "partial" in kinds and "FINAL" in kinds
    times = [float(r[0]) for r in rows]
    assert times == sorted(times)
    assert all(float(r[0]) >= float(r[4]) for r in rows)  # emitted after its audio
    finals = " ".join(r[5] for r in rows if r[1] == "FINAL")
    assert wer("en_real_librivox_0870", finals) <= 0.15
    srt = out.read_text()
    assert "-->" in srt and "dashwood" in srt.lower()
    assert "RTF" in proc.stderr
    saved = [json.loads(x) for x in (tmp_path / "c.jsonl").read_text().splitlines()]
    assert [e["text"] for e in saved] == [r[5] for r in rows if r[1] == "FINAL" and r[5]]


def test_transcribe_live_missing_file_is_one_line(tmp_path: Path) -> None:
    proc = run_cli("transcribe", str(tmp_path / "nope.wav"), "--live", timeout=60)
    assert proc.returncode != 0
    assert len(proc.stderr.strip().splitlines()) == 1 and "nope.wav" in proc.stderr


def test_dictate_without_sound_card_says_so_in_one_line(tmp_path: Path) -> None:
    cards = Path("/proc/asound/cards")
    if cards.exists() and "no soundcards" not in cards.read_text():
        pytest.skip("this machine has a real sound card")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PULSE_", "XDG_RUNTIME"))}
    env.update(PULSE_SERVER=f"unix:{tmp_path}/no-such-server", XDG_RUNTIME_DIR=str(tmp_path))
    proc = run_cli("dictate", env=env, timeout=60)
    assert proc.returncode != 0
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()]
    assert "no microphone" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.mic
@pytest.mark.model
def test_dictate_through_a_virtual_microphone(pulse_mic: PulseMic, tmp_path: Path) -> None:
    """Real PortAudio capture from PulseAudio playing JFK in a loop; Ctrl-C ends it cleanly
    and the utterance being spoken still gets its final caption."""
    out = tmp_path / "dictation.txt"
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamcap.cli", "dictate", "--language", "en",
         "--output", str(out)],
        cwd=ROOT, env=pulse_mic.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    lines: queue.Queue[str] = queue.Queue()
    assert proc.stdout is not None

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line.rstrip("\n"))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    got: list[str] = []
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not any("americans" in g.lower() for g in got):
            try:
                got.append(lines.get(timeout=1))
            except queue.Empty:
                assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        assert any("americans" in g.lower() for g in got), got
        time.sleep(1.5)  # into the next sentence of the loop: Ctrl-C mid-utterance
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(10)
    while not lines.empty():
        got.append(lines.get())
    err = proc.stderr.read() if proc.stderr else ""
    assert proc.returncode == 0, err[-3000:]
    assert "stopping" in err and "Traceback" not in err
    saved = out.read_text().splitlines()
    assert saved and saved == [g for g in got if g.strip()]
    text = norm_text(" ".join(saved))
    assert "fellow americans" in text and "country" in text


@pytest.mark.model
def test_feeding_never_waits_for_the_worker(engine) -> None:  # type: ignore[no-untyped-def]
    """The thread contract: while the worker thread holds the stream (here: a decode observer
    that does not return), `feed` and `finish` return at once, and the audio they brought is
    processed, in order, when the worker lets go."""
    worker = InferenceWorker(engine).start()
    try:
        stream = LiveStream("t", worker, None, LiveConfig(language="en"), RealClock())
        events = collect(stream)
        holding = threading.Event()  # the worker is inside the observer right now
        release = threading.Event()

        def observe(job: DecodeJob, out: JobOutcome) -> None:
            if not release.is_set():
                holding.set()
                release.wait(20)
                holding.clear()

        stream.decode_observer = observe
        jfk = load_audio(DATA / "en_real_jfk.wav")
        chunks = [jfk[i : i + SR // 10] for i in range(0, len(jfk), SR // 10)]
        chunks += [np.zeros(SR // 10, np.float32)] * 15
        fed_while_held = 0
        for i, chunk in enumerate(chunks):
            if i == 30:  # 3 s in: a partial decode is due; wait until the worker holds on
                assert holding.wait(60)
            stream.feed(chunk)
            fed_while_held += holding.is_set()
        stream.finish()
        finished_while_held = holding.is_set()
        release.set()
        assert stream.wait_idle(120)
    finally:
        worker.stop()
    assert fed_while_held > 10 and finished_while_held  # returned while the worker held it
    assert not stream.errors
    finals = " ".join(c.text for _, c in events if c.type == "final")
    assert "fellow americans" in norm_text(finals) and "your country" in norm_text(finals)
    seqs = [c.seq for _, c in events]
    assert seqs == list(range(1, len(seqs) + 1))
