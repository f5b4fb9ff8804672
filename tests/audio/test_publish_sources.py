"""A publisher's sources (`audio.capture`, `audio.stream_input`, `audio.monitor`) without a
server or a model: real pipes, URLs served by the ffmpeg program on loopback (RTMP, and SRT,
which PyAV's own FFmpeg lacks and the ffmpeg program reads), a real PulseAudio monitor; the
audio that comes out is compared with the file that went in."""

from __future__ import annotations

import io
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
from publishkit import free_port
from pulse_mic import SINK, PulseMic, best_alignment, missing_reason

from streamcap.audio import load_audio
from streamcap.audio.capture import open_url
from streamcap.audio.errors import AudioError, DeviceNotFoundError
from streamcap.audio.monitor import MonitorSource, monitor_name
from streamcap.audio.stream_input import (
    RawPcm,
    is_live,
    is_url,
    raw_chunks,
    spool_stdin,
    url_for_messages,
)

DATA = Path(__file__).resolve().parents[1] / "data"
JFK = DATA / "en_real_jfk.wav"


def ffmpeg(*args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(["ffmpeg", "-nostdin", "-v", "error", *args])


def test_raw_pcm_from_a_pipe_is_the_file() -> None:
    pcm = subprocess.run(
        ["ffmpeg", "-v", "error", "-i", str(JFK), "-f", "s16le", "-ar", "44100", "-ac", "2", "-"],
        capture_output=True, check=True, timeout=60,
    ).stdout  # fmt: skip
    chunks = list(raw_chunks(io.BytesIO(pcm + b"\x01"), RawPcm("s16le", 44100, 2)))  # torn end
    audio = np.concatenate(chunks)
    assert abs(audio.size - 11 * 16000) < 200 and all(c.dtype == np.float32 for c in chunks)
    corr, _ = best_alignment(audio[16000:80000], load_audio(JFK))
    assert corr > 0.99
    with pytest.raises(ValueError, match="8000-384000"):
        RawPcm("s16le", 100, 1)


def test_standard_input_is_spooled_whole_and_an_empty_one_refused(tmp_path: Path) -> None:
    wav = JFK.read_bytes()
    path = spool_stdin(io.BytesIO(wav), None, str(tmp_path))
    try:
        assert path.read_bytes() == wav
    finally:
        path.unlink()
    raw = spool_stdin(io.BytesIO(b"\0\0" * 16000), RawPcm("s16le", 16000, 1), str(tmp_path))
    assert load_audio(raw).size == 16000  # a WAV of what came
    raw.unlink()
    with pytest.raises(AudioError, match="no audio on standard input"):
        spool_stdin(io.BytesIO(b""), None, str(tmp_path))
    assert list(tmp_path.iterdir()) == []  # nothing left behind


def test_urls_are_told_from_files_and_passwords_never_shown() -> None:
    assert is_url("https://x/a.m3u8") and is_url("rtmp://h/live") and is_url("srt://h:1")
    assert not is_url("talk.mp4") and not is_url("C:/talk.mp4") and not is_url("-")
    assert url_for_messages("rtsp://ana:s3cret@cam/1") == "rtsp://ana:***@cam/1"
    assert monitor_name(None) == "@DEFAULT_MONITOR@" and monitor_name("obs") == "obs.monitor"


@pytest.mark.parametrize("scheme", ["rtmp", "srt"])
def test_a_live_stream_served_by_ffmpeg(scheme: str) -> None:
    port = free_port()
    if scheme == "rtmp":
        url = f"rtmp://127.0.0.1:{port}/live/test"
        server = ffmpeg("-re", "-i", str(JFK), "-c:a", "aac", "-f", "flv", "-listen", "1", url)
    else:  # PyAV's FFmpeg has no SRT: the ffmpeg program reads it for us
        url = f"srt://127.0.0.1:{port}"
        server = ffmpeg("-re", "-i", str(JFK), "-c:a", "aac", "-f", "mpegts",
                        f"{url}?mode=listener")  # fmt: skip
    try:
        time.sleep(1.0)
        source = open_url(url)
        audio = np.concatenate(list(source.chunks))
        source.stop()
    finally:
        if server.poll() is None:
            server.kill()
        server.wait(30)
    assert source.live
    assert 9.5 * 16000 < audio.size < 12 * 16000
    corr, _ = best_alignment(audio[32000:96000], load_audio(JFK))
    assert corr > 0.9  # AAC on the way: not bit-exact


def test_a_file_on_a_web_server_is_not_live(tmp_path: Path) -> None:
    import av

    container = av.open(str(JFK))
    try:
        assert not is_live("http://127.0.0.1/a.wav", container)  # it has a length
        assert is_live("rtsp://127.0.0.1/a", container)
    finally:
        container.close()


@pytest.mark.mic
def test_a_monitor_records_what_is_played_and_a_wrong_one_is_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reason = missing_reason()
    if reason:
        pytest.skip(reason)
    with PulseMic() as pulse:
        monkeypatch.setenv("PULSE_SERVER", pulse.server)
        with pytest.raises(DeviceNotFoundError, match=f"monitors: {SINK}.monitor"):
            MonitorSource("no_such_sink").start()
        monitor = MonitorSource(SINK).start()
        try:
            pulse.play(JFK)  # a seamless loop into the sink
            got: list[np.ndarray] = []
            for chunk in monitor:
                got.append(chunk)
                if len(got) >= 40:  # 4 s
                    break
        finally:
            monitor.stop()
    audio = np.concatenate(got)[8000:]
    corr, _ = best_alignment(audio, load_audio(JFK))
    assert corr > 0.9, corr
