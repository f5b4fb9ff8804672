"""`streamcap publish` into a real server on loopback (the bundled model), as a user runs it:
a file at real time, standard input through a real pipe (raw PCM and a WAV container), URLs
served by ffmpeg (an HTTP stream, live) and by a small HTTP server (an HLS playlist), and a
wrong token. The finals are read from the server's recording. Restarts and the PulseAudio
monitor: tests/cli/test_publish_restart.py."""

from __future__ import annotations

import functools
import http.server
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from publishkit import DATA, TOKEN, Publish, coverage, finals, free_port
from serverkit import ServeProcess

pytestmark = pytest.mark.model

JFK = DATA / "en_real_jfk.wav"
ENV = {"STREAMCAP_PUBLISH_TOKEN": TOKEN}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServeProcess, Path]]:
    record = tmp_path_factory.mktemp("record")
    srv = ServeProcess("--record", str(record), "--publish-token", TOKEN, "--language", "en")
    try:
        yield srv, record
    finally:
        srv.stop()
        assert TOKEN not in srv.text()  # the server never logs it either


def published(srv: ServeProcess, record: Path, stream: str, *args: str, stdin=None) -> str:  # noqa: ANN001
    """Publish to `stream` and wait for every caption; the finals' text."""
    pub = Publish(*args, "--server", srv.ws, "--stream", stream, env=ENV, stdin=stdin)
    rc = pub.wait(240)
    assert rc == 0, pub.text()
    assert "stopped: every caption is out" in pub.text(), pub.text()
    assert TOKEN not in pub.text() + pub.stdout and TOKEN not in " ".join(pub.cmd)
    return " ".join(f["text"] for f in finals(record, stream))


def test_a_file_at_real_time(server: tuple[ServeProcess, Path]) -> None:
    srv, record = server
    t0 = time.monotonic()
    text = published(srv, record, "file", str(JFK))
    assert coverage(text)["en_real_jfk"] > 0.9, text
    # paced as it is said: 11 s of speech, at most the flood guard's 5 s ahead
    assert time.monotonic() - t0 > 11 - 5


def test_a_wrong_token_is_refused_at_once_without_retrying(
    server: tuple[ServeProcess, Path],
) -> None:
    srv, _ = server
    pub = Publish(str(JFK), "--server", srv.ws, "--stream", "nope", "--token", "wrong-one")
    assert pub.wait(60) == 1
    assert "the server refused the stream: wrong publish token" in pub.text(), pub.text()
    assert "reconnecting" not in pub.text() and "wrong-one" not in pub.text()


@pytest.mark.parametrize("kind", ["raw", "wav"])
def test_standard_input_through_a_pipe(server: tuple[ServeProcess, Path], kind: str) -> None:
    """ffmpeg writes the clip into a real pipe: raw PCM (22.05 kHz stereo s16le, as the flags
    say), or a WAV container that says its own layout (its length unknown in a pipe)."""
    srv, record = server
    if kind == "raw":
        out, flags = ["-f", "s16le", "-ar", "22050", "-ac", "2"], ["--format", "s16le",
                                                                  "--rate", "22050",
                                                                  "--channels", "2"]  # fmt: skip
    else:
        out, flags = ["-f", "wav"], []
    ffmpeg = subprocess.Popen(
        ["ffmpeg", "-v", "error", "-i", str(JFK), *out, "-"], stdout=subprocess.PIPE
    )
    try:
        text = published(srv, record, f"stdin-{kind}", "-", *flags, stdin=ffmpeg.stdout)
    finally:
        assert ffmpeg.stdout is not None
        ffmpeg.stdout.close()
        ffmpeg.wait(30)
    assert coverage(text)["en_real_jfk"] > 0.9, text


def test_a_live_http_stream_served_by_ffmpeg(server: tuple[ServeProcess, Path]) -> None:
    """``ffmpeg -re ... -listen 1 http://...``: an MP3 stream at real time, no length (live)."""
    srv, record = server
    port = free_port()
    url = f"http://127.0.0.1:{port}/live.mp3"
    ffmpeg = subprocess.Popen(
        ["ffmpeg", "-v", "error", "-re", "-i", str(JFK), "-c:a", "libmp3lame", "-f", "mp3",
         "-listen", "1", url],
    )  # fmt: skip
    try:
        time.sleep(1.0)  # ffmpeg opens its listening socket
        text = published(srv, record, "http-live", url)
    finally:
        if ffmpeg.poll() is None:
            ffmpeg.kill()
        ffmpeg.wait(30)
    assert coverage(text)["en_real_jfk"] > 0.9, text


def test_an_hls_playlist_over_http(server: tuple[ServeProcess, Path], tmp_path: Path) -> None:
    """An HLS folder (AAC segments of 2 s, a VOD playlist) served on loopback by a small HTTP
    server: FFmpeg follows the playlist; the file is sent at real time."""
    srv, record = server
    hls = tmp_path / "hls"
    hls.mkdir()
    subprocess.run(
        ["ffmpeg", "-v", "error", "-i", str(JFK), "-c:a", "aac", "-b:a", "64k", "-f", "hls",
         "-hls_time", "2", "-hls_playlist_type", "vod", str(hls / "index.m3u8")],
        check=True, timeout=60,
    )  # fmt: skip
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(hls))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{httpd.server_address[1]}/index.m3u8"
        text = published(srv, record, "hls", url)
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert coverage(text)["en_real_jfk"] > 0.9, text
