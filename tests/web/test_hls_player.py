"""Issue 39, item 4, in a real player: hls.js (pinned, from the npm registry) in real headless
Chromium plays a master playlist that streamcap serves (`/streams/ID/master.m3u8?video=...`):
a real H.264/AAC test rendition made by ffmpeg, served by a tiny loopback server of its own
(another origin, allowed with --allow-origin), and streamcap's live subtitle rendition of a
stream that publishes while the page plays. The subtitle track's cues, read in the browser,
are the stream's finals at their stream times (the timestamp map puts stream second 0 at the
video's first timestamp), arriving while the stream is live; a screenshot shows a caption
over the video (`out/hls/`, and `STREAMCAP_SHOTS_DIR=DIR`). The stream is a stand-in timed
by its audio (`hlskit`); tests/server/test_hls_live.py reads a real model's stream with ffmpeg.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
import io
import os
import shutil
import subprocess
import tarfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import quote

import pytest
from hlskit import hls_server, publish_in_background
from overlaykit import chromium

from streamcap.server import hls

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="needs ffmpeg"),
]

HLS_JS = "1.6.15"
HLS_JS_TGZ = f"https://registry.npmjs.org/hls.js/-/hls.js-{HLS_JS}.tgz"
#: the registry's `dist.integrity` for that version
HLS_JS_SHA512 = (
    "E3a5VwgXimGHwpRGV+WxRTKeSp2DW5DI5MWv34ulL3t5UNmyJWCQ1KmLEHbYzcfThfXG8amBL+fCYPneGHC4VA=="
)
OUT = Path(__file__).resolve().parents[2] / "out" / "hls"
SHOTS = os.environ.get("STREAMCAP_SHOTS_DIR")
SECONDS = 20  # the stream: a final "Words N." at N..N+0.9 s for N < 20

PAGE = """<!doctype html><meta charset="utf-8"><title>streamcap captions in hls.js</title>
<style>body { margin: 0; background: #111; } video { width: 640px; height: 480px; }</style>
<video id="v" muted playsinline></video>
<script src="hls.min.js"></script>
<script>
const video = document.getElementById("v");
window.log = [];
const hls = new Hls({ subtitleDisplay: true, renderTextTracksNatively: true });
for (const name of ["ERROR", "SUBTITLE_TRACKS_UPDATED", "SUBTITLE_FRAG_PROCESSED"]) {
  hls.on(Hls.Events[name], (_, d) => window.log.push([name, d.details || "", d.fatal || false,
    d.frag ? d.frag.sn : null, d.subtitleTracks ? d.subtitleTracks.length : null]));
}
hls.on(Hls.Events.MANIFEST_PARSED, () => video.play());
hls.loadSource(new URLSearchParams(location.search).get("src"));
hls.attachMedia(video);
window.cues = () => [...video.textTracks].filter((t) => t.kind === "subtitles")
  .flatMap((t) => [...(t.cues || [])].map((c) => [t.mode, c.startTime, c.endTime, c.text]));
</script>
"""


def hls_js(cache: Path) -> Path:
    """hls.js's dist/hls.min.js of the pinned version, fetched from the npm registry once
    (checked against the registry's integrity hash) and kept in pytest's cache."""
    js = cache / "hls.min.js"
    if js.exists():
        return js
    try:
        with urllib.request.urlopen(HLS_JS_TGZ, timeout=60) as r:
            tgz = r.read()
    except OSError as e:
        pytest.skip(f"hls.js {HLS_JS} is not cached and the npm registry cannot be reached: {e}")
    assert base64.b64encode(hashlib.sha512(tgz).digest()).decode() == HLS_JS_SHA512
    with tarfile.open(fileobj=io.BytesIO(tgz)) as tar:
        member = tar.extractfile("package/dist/hls.min.js")
        assert member is not None
        js.write_bytes(member.read())
    return js


def make_video(folder: Path) -> int:
    """A 30 s H.264 + AAC test rendition as HLS (6 s segments); returns its first timestamp
    in 90 kHz ticks (ffmpeg's MPEG-TS starts at 1.4 s)."""
    subprocess.run(
        ["ffmpeg", "-hide_banner", "-loglevel", "error", "-f", "lavfi", "-i",
         "testsrc=size=320x240:rate=10", "-f", "lavfi", "-i", "sine=frequency=440", "-t", "30",
         "-c:v", "libx264", "-preset", "ultrafast", "-g", "10", "-pix_fmt", "yuv420p",
         "-c:a", "aac", "-b:a", "64k", "-f", "hls", "-hls_time", "6",
         "-hls_playlist_type", "vod", "-hls_segment_filename", str(folder / "v%d.ts"),
         str(folder / "video.m3u8")],
        check=True, timeout=120,
    )  # fmt: skip
    probe = subprocess.run(
        ["ffprobe", "-v", "error", "-show_entries", "format=start_time", "-of", "csv=p=0",
         str(folder / "v0.ts")],
        check=True, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    return round(float(probe.stdout) * 90000)


@contextlib.contextmanager
def static_server(folder: Path) -> Iterator[str]:
    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=folder))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_hls_js_plays_the_live_subtitle_track_beside_a_video(
    tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(hls, "END_AFTER_S", 1.0)
    cache = getattr(request.config, "cache", None)  # None with -p no:cacheprovider
    folder = cache.mkdir(f"hls.js-{HLS_JS}") if cache is not None else tmp_path
    site = tmp_path / "site"
    site.mkdir()
    shutil.copy(hls_js(folder), site / "hls.min.js")
    (site / "index.html").write_text(PAGE)
    mpegts = make_video(site)
    with static_server(site) as page, hls_server(allowed_origins=(page,)) as srv:
        pub = publish_in_background(srv, "show", SECONDS)
        master = srv.url(
            f"/streams/show/master.m3u8?video={quote(page + '/video.m3u8', safe='')}"
            f"&resolution=320x240&lang=en&name=Captions&mpegts={mpegts}"
        )
        with chromium("--autoplay-policy=no-user-gesture-required") as browser:
            tab = browser.new_page(viewport={"width": 640, "height": 480})
            tab.goto(f"{page}/index.html?src={quote(master, safe='')}")
            live_cues = 0
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline:
                cues = tab.evaluate("window.cues()")
                if pub.is_alive():
                    live_cues = len(cues)
                if len(cues) >= SECONDS:
                    break
                time.sleep(0.5)
            log = tab.evaluate("window.log")
            tab.evaluate("""async () => { const v = document.getElementById("v"); v.pause();
                v.currentTime = 13.3; await new Promise((ok) => v.addEventListener("seeked", ok,
                { once: true })); }""")
            tab.wait_for_function(
                "[...document.getElementById('v').textTracks].some((t) => t.activeCues && "
                "t.activeCues.length)",
                timeout=10000,
            )
            active = tab.evaluate("""() => [...document.getElementById("v").textTracks]
                .flatMap((t) => [...(t.activeCues || [])].map((c) => c.text))""")
            OUT.mkdir(parents=True, exist_ok=True)
            shot = OUT / "hls-js-captions.png"
            tab.screenshot(path=str(shot))
            if SHOTS:
                shutil.copy(shot, Path(SHOTS) / shot.name)
        pub.join(30)
    assert not [e for e in log if e[0] == "ERROR" and e[2]], log  # no fatal error
    assert any(e[0] == "SUBTITLE_TRACKS_UPDATED" and e[4] == 1 for e in log), log
    print(f"\n{live_cues} of {SECONDS} cues were in the browser's track while the stream was live")
    assert live_cues > 0  # the track filled in while the stream published
    assert [c[3] for c in cues] == [f"Words {n}." for n in range(SECONDS)]
    for n, (mode, start, end, _) in enumerate(cues):
        assert mode == "showing"
        assert abs(start - n) < 0.05 and abs(end - (n + 0.9)) < 0.05, (n, start, end)
    assert active == ["Words 13."]
