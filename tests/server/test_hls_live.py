"""Issue 39, item 4, end to end: real speech published at real time into a real server with the
bundled Whisper model, and the stream's HLS subtitle rendition read *live* by the real ffmpeg
(``ffmpeg -i http://.../captions.m3u8 -c copy out.vtt``): ffmpeg starts as soon as the stream
does, before its first segment is out (the playlist request waits for it), follows the live
playlist as segments appear, stops at ``#EXT-X-ENDLIST``,
and what it wrote is every final the viewers got, at the finals' times.
"""

from __future__ import annotations

import io
import re
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import webvtt
from hlskit import get, segment_uris
from serverkit import Collector, padded, run_publish, words

from streamcap.server import hls
from streamcap.server.config import ServerConfig
from streamcap.server.thread import ServerThread

pytestmark = [
    pytest.mark.model,
    pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="needs ffmpeg"),
]


def seconds(stamp: str) -> float:
    parts = [float(p) for p in stamp.split(":")]
    return sum(p * 60**k for k, p in enumerate(reversed(parts)))


def test_ffmpeg_reads_the_live_playlist_while_the_stream_publishes(
    worker: Any, speech: dict[str, np.ndarray], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(hls, "END_AFTER_S", 2.0)
    audio = np.concatenate([padded(speech["en_real_jfk"]), padded(speech["en_real_librivox_0870"])])
    out = tmp_path / "out.vtt"
    config = ServerConfig(port=0, admission=False)
    with ServerThread(config, worker) as srv:
        viewer = Collector(srv, "talk", token=None)
        pub = threading.Thread(target=run_publish, args=(srv, "talk", audio), daemon=True)
        started = time.monotonic()
        pub.start()
        url = srv.url("/streams/talk/captions.m3u8")
        while get(srv.url("/streams/talk/names"))[0] != 200:  # the stream has started
            assert pub.is_alive(), "the stream ended before it started"
            time.sleep(0.05)
        # no segment yet (the first is out at 9 s at the earliest): ffmpeg's first request for
        # the playlist waits for it, as a player's does
        ffmpeg_at = time.monotonic() - started
        speaking = pub.is_alive()
        ffmpeg = subprocess.run(
            ["ffmpeg", "-hide_banner", "-nostdin", "-y", "-i", url, "-c", "copy", str(out)],
            capture_output=True, text=True, timeout=180,
        )  # fmt: skip
        ffmpeg_took = time.monotonic() - started - ffmpeg_at
        pub.join(60)
        final_playlist = get(url)[2]
        viewer.stop()
    print(f"\nffmpeg started {ffmpeg_at:.1f} s into a {len(audio) / 16000:.1f} s stream and "
          f"read it live for {ffmpeg_took:.1f} s")  # fmt: skip
    assert ffmpeg.returncode == 0, ffmpeg.stderr[-2000:]
    assert speaking and ffmpeg_at < 6, "ffmpeg must start before the first segment is out"
    opened = re.findall(r"Opening '[^']*/captions-(\d+)\.vtt", ffmpeg.stderr)
    assert [int(i) for i in opened] == list(range(len(segment_uris(final_playlist))))
    assert final_playlist.endswith("#EXT-X-ENDLIST\n")
    finals = viewer.finals()
    assert len(finals) >= 2
    cues = webvtt.from_buffer(io.StringIO(out.read_text()))
    assert words(" ".join(c.text for c in cues)) == words(" ".join(f["text"] for f in finals))
    assert "ask not what your country" in " ".join(words(viewer.text()))
    for c in cues:  # each cue within the final it came from (stream seconds, as viewers got)
        start, end = seconds(c.start), seconds(c.end)
        assert any(f["start"] - 0.01 <= start <= end <= f["end"] + 0.01 for f in finals), c
