"""Issue 39, item 4: `/streams/ID/captions.m3u8`, its `.vtt` segments and `master.m3u8` from a
real server on loopback. Segments are published as the stream's clock passes them (never one
that a final could still land in), the playlist slides and ends with the stream; the rules of
the subtitle downloads hold: the view token, the byte budget (429), a browser page allowed by
--allow-origin (CORS), one-line refusals for a bad query. Stand-in streams (`hlskit`): the
routes are under test; tests/server/test_hls_live.py reads a real stream with ffmpeg.
"""

from __future__ import annotations

import json
import re
import time
import urllib.request
from pathlib import Path
from urllib.parse import quote

import pytest
from hlskit import get, hls_server, publish_in_background, segment_uris
from recordkit import final, write_recording

from streamcap.server import hls

PLAYLIST = "application/vnd.apple.mpegurl"


def test_a_stream_as_a_live_playlist_then_ended(monkeypatch: pytest.MonkeyPatch) -> None:
    """A publisher sends 14 s of audio at real time (a final per second): while it runs, the
    playlist lists the segments the clock has passed (less the settle margin) and no more;
    after it, every final is in a segment and the playlist ends."""
    monkeypatch.setattr(hls, "END_AFTER_S", 1.0)
    with hls_server() as srv:
        url = srv.url("/streams/live/captions.m3u8")
        assert get(url)[0] == 404  # no such stream yet
        pub = publish_in_background(srv, "live", 14.0)
        seen: list[tuple[float, int]] = []
        t0 = time.monotonic()
        while pub.is_alive():
            status, headers, text = get(url)
            if status == 200:
                assert headers["content-type"] == PLAYLIST
                assert "#EXT-X-ENDLIST" not in text
                seen.append((time.monotonic() - t0, len(segment_uris(text))))
            time.sleep(0.5)
        pub.join()
        # 6 s segments, 3 s margin: the first is out at ~9 s, the second at ~15 s
        assert all(n <= max(0, int((t - 3 + 0.5) // 6)) for t, n in seen), seen
        assert any(n == 1 for _, n in seen), seen
        deadline = time.monotonic() + 10
        while "#EXT-X-ENDLIST" not in (text := get(url)[2]) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert text.splitlines()[-1] == "#EXT-X-ENDLIST"
        uris = segment_uris(text)
        assert uris == ["captions-0.vtt", "captions-1.vtt", "captions-2.vtt"]  # 14 s: 3 segments
        bodies = [get(srv.url(f"/streams/live/{u}")) for u in uris]
    assert all(s == 200 and h["content-type"] == "text/vtt; charset=utf-8" for s, h, _ in bodies)
    said = [re.findall(r"Words \d+\.", b) for _, _, b in bodies]
    assert said[0] == [f"Words {k}." for k in range(6)]  # 0-6 s
    assert said[1] == [f"Words {k}." for k in range(6, 12)]
    assert said[2] == ["Words 12.", "Words 13."]  # each final once, in its own segment


def test_a_recorded_stream_reads_back_as_ended(tmp_path: Path) -> None:
    write_recording(tmp_path, "old", [final("old", k) for k in range(1, 9)])
    with hls_server(record_dir=tmp_path) as srv:
        status, _, text = get(srv.url("/streams/old/captions.m3u8"))
        assert status == 200 and text.endswith("#EXT-X-ENDLIST\n")
        assert segment_uris(text) == ["captions-0.vtt", "captions-1.vtt"]  # finals at 1-8.9 s
        seg = get(srv.url("/streams/old/captions-1.vtt"))[2]
    assert "00:00:06.000 --> 00:00:06.900\nfinal 6\n" in seg


def test_view_token_carried_into_the_uris_with_the_timestamp_map(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(hls, "END_AFTER_S", 0.0)  # the publisher's stop ends the stream
    with hls_server(view_token="v s/ecret") as srv:
        publish_in_background(srv, "t", 2.0).join()
        base = srv.url("/streams/t/captions.m3u8")
        assert get(base)[0] == 401
        assert get(base + "?token=wrong")[0] == 401
        tok = quote("v s/ecret", safe="")
        status, _, text = get(f"{base}?token={tok}&mpegts=126000")
        assert status == 200
        assert segment_uris(text) == [f"captions-0.vtt?token={tok}&mpegts=126000"]
        seg = get(srv.url(f"/streams/t/{segment_uris(text)[0]}"))[2]
        assert seg.startswith("WEBVTT\nX-TIMESTAMP-MAP=MPEGTS:126000,LOCAL:00:00:00.000\n")
        # a token in the header is not written into the playlist
        bearer = {"Authorization": "Bearer v s/ecret"}
        assert segment_uris(get(base, bearer)[2]) == ["captions-0.vtt"]
        master = get(srv.url(f"/streams/t/master.m3u8?token={tok}&lang=en"))[2]
        assert f'LANGUAGE="en",URI="captions.m3u8?token={tok}"' in master


def test_segments_name_speakers_as_renamed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hls, "END_AFTER_S", 0.0)
    with hls_server() as srv:
        publish_in_background(srv, "r", 2.0, prompt="labelled").join()
        req = urllib.request.Request(
            srv.url("/streams/r/names"), data=json.dumps({"Speaker 1": "Ana"}).encode()
        )
        with urllib.request.urlopen(req, timeout=10) as answer:
            assert answer.status == 200
        seg = get(srv.url("/streams/r/captions-0.vtt"))[2]
    assert "\n<v Ana>Words 0.\n" in seg and "<v Ana>Words 1." in seg


def test_bad_queries_are_refused_in_one_line() -> None:
    with hls_server() as srv:
        publish_in_background(srv, "q", 1.0).join()
        for path, message in [
            ("captions.m3u8?mpegts=-1", "mpegts is the video's 90 kHz timestamp"),
            ("captions.m3u8?mpegts=8589934592", "mpegts is the video's 90 kHz timestamp"),
            ("master.m3u8?video=a%22b", "video: a URI"),
            ("master.m3u8?video=%23EXTINF:1", "video: a URI"),
            ("master.m3u8?video=v.m3u8&bandwidth=lots", "bandwidth"),
            ("master.m3u8?video=v.m3u8&resolution=big", "resolution"),
            ("master.m3u8?name=a%0Ab", "name:"),
            ("master.m3u8?lang=english!", "lang:"),
        ]:
            status, _, text = get(srv.url(f"/streams/q/{path}"))
            assert status == 400 and message in text and text.count("\n") == 1, (path, text)
        assert get(srv.url("/streams/q/captions-7.vtt"))[0] == 404
        assert get(srv.url("/streams/nope/captions-0.vtt"))[0] == 404
        master = get(srv.url("/streams/q/master.m3u8?video=http://h/v.m3u8&resolution=320x240"))
    assert master[0] == 200 and master[1]["content-type"] == PLAYLIST
    assert master[2].splitlines()[-2:] == [
        '#EXT-X-STREAM-INF:BANDWIDTH=2000000,RESOLUTION=320x240,SUBTITLES="subs"',
        "http://h/v.m3u8",
    ]


def test_cors_for_allowed_pages_only_and_the_download_budget() -> None:
    page = "http://127.0.0.1:9999"
    with hls_server(allowed_origins=(page,), download_burst=1000, download_rate=1) as srv:
        publish_in_background(srv, "c", 1.0).join()
        url = srv.url("/streams/c/captions.m3u8")
        _, allowed, _ = get(url, {"Origin": page})
        _, other, _ = get(url, {"Origin": "http://evil.example"})
        assert allowed["access-control-allow-origin"] == page and allowed["vary"] == "Origin"
        assert "access-control-allow-origin" not in other
        statuses = [get(url)[0] for _ in range(30)]  # 76 bytes each: the burst runs out
    assert 429 in statuses and statuses[0] == 200
