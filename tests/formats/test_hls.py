"""The live HLS subtitle rendition's pure logic (`formats.hls`): which cues go in which
segment, when a segment is published, the playlists' lines (RFC 8216), and each segment
read back by a WebVTT parser (webvtt-py). No clock, socket or server: times are inputs.
"""

from __future__ import annotations

import io

import pytest
import webvtt

from streamcap.core.captions import Caption
from streamcap.formats.hls import (
    OPEN_AT_MOST_S,
    LiveVttTrack,
    VideoVariant,
    master_playlist,
    vtt_segment,
)

URI = "captions-{}.vtt".format


def final(
    seq: int, start: float, end: float, text: str = "", speaker: str = "", segment: int = -1
) -> Caption:
    text = text or f"Final number {seq}."
    seg = seq if segment < 0 else segment
    return Caption("final", "s", seq, seg, text, start, end, len(text), 0.0, speaker=speaker)


def partial(seq: int, segment: int, start: float) -> Caption:
    return Caption("partial", "s", seq, segment, "being said", start, start + 1, 0, 0.0)


def cues(text: str) -> list[tuple[float, float, str]]:
    """A segment's cues as webvtt-py reads them (it refuses a file that is not WebVTT)."""
    doc = webvtt.from_buffer(io.StringIO(text))
    return [(seconds(c.start), seconds(c.end), c.raw_text) for c in doc.captions]


def seconds(stamp: str) -> float:
    h, m, s = stamp.split(":")
    return int(h) * 3600 + int(m) * 60 + float(s)


def test_segments_hold_the_cues_that_overlap_them_with_their_own_times() -> None:
    track = LiveVttTrack()  # 6 s segments
    track.feed([final(1, 1.0, 3.0), final(2, 4.5, 7.5, speaker="Mary"), final(3, 13.0, 14.0)])
    track.advance(12.0)  # segments 0 and 1 end by 12 s
    assert track.published == 2
    s0, s1 = track.segment(0, mpegts=126000), track.segment(1)
    assert s0 is not None and s1 is not None
    assert s0.startswith("WEBVTT\nX-TIMESTAMP-MAP=MPEGTS:126000,LOCAL:00:00:00.000\n\n")
    assert cues(s0) == [(1.0, 3.0, "Final number 1."), (4.5, 7.5, "<v Mary>Final number 2.")]
    assert cues(s1) == [(4.5, 7.5, "<v Mary>Final number 2.")]  # across the boundary: in both
    assert track.segment(2) is None  # 12-18 s: not yet (13 s is not settled)
    track.advance(18.0)
    assert cues(track.segment(2) or "") == [(13.0, 14.0, "Final number 3.")]


def test_a_long_final_is_cut_into_the_cue_policys_cues() -> None:
    text = "This is a long sentence that will not fit on two lines of forty two characters at all."
    track = LiveVttTrack()
    track.feed([final(1, 0.5, 5.5, text)])
    track.advance(6.0)
    got = cues(track.segment(0) or "")
    assert len(got) == 2 and got[0][0] == 0.5 and got[-1][1] == 5.5
    assert all(len(line) <= 42 for c in got for line in c[2].split("\n"))
    assert " ".join(c[2].replace("\n", " ") for c in got) == text


def test_an_utterance_being_spoken_holds_its_segments_back() -> None:
    track = LiveVttTrack()
    track.feed([final(1, 1.0, 2.0), partial(2, segment=7, start=5.0)])
    assert track.settled_s(now_s=20.0, margin_s=3.0) == 5.0  # not past the partial's start
    track.advance(track.settled_s(20.0, 3.0))
    assert track.published == 0  # segment 0 (0-6 s) would cut the utterance off
    track.feed([final(3, 5.0, 9.0, "The utterance, done.", segment=7)])  # its final: no longer open
    track.advance(track.settled_s(20.0, 3.0))
    assert track.published == 2  # 17 s settled: 0-6 and 6-12
    assert "The utterance, done." in (track.segment(0) or "")


def test_a_partial_whose_final_never_came_stops_holding_back() -> None:
    """The hallucination guard dropped the final: its partial is waited for a while only."""
    track = LiveVttTrack()
    track.feed([partial(1, segment=1, start=2.0)])
    assert track.settled_s(2.0 + OPEN_AT_MOST_S - 1, 3.0) == 2.0
    assert track.settled_s(2.0 + OPEN_AT_MOST_S + 1, 3.0) == 2.0 + OPEN_AT_MOST_S - 2


def test_a_final_too_late_for_its_segment_is_shown_later_not_lost() -> None:
    track = LiveVttTrack()
    track.advance(12.0)
    track.feed([final(1, 10.0, 11.0, "Late words.")])  # its segment (6-12 s) is out already
    track.advance(18.0)
    assert cues(track.segment(2) or "") == [(12.0, 13.0, "Late words.")]
    assert track.late_finals == 1


def test_the_live_playlist_slides_and_ends() -> None:
    track = LiveVttTrack(window=3)
    track.advance(30.0)  # 5 segments
    text = track.playlist(lambda i: URI(i) + "?token=t")
    assert text.splitlines() == [
        "#EXTM3U", "#EXT-X-VERSION:3", "#EXT-X-TARGETDURATION:6", "#EXT-X-MEDIA-SEQUENCE:2",
        "#EXTINF:6.000,", "captions-2.vtt?token=t", "#EXTINF:6.000,", "captions-3.vtt?token=t",
        "#EXTINF:6.000,", "captions-4.vtt?token=t",
    ]  # fmt: skip
    assert track.segment(0) is not None  # slid out, still answerable a while
    track.feed([final(1, 31.0, 33.5)])
    track.finish(33.5)
    lines = track.playlist(URI).splitlines()
    assert lines[-1] == "#EXT-X-ENDLIST" and lines[-2] == "captions-5.vtt"
    assert cues(track.segment(5) or "") == [(31.0, 33.5, "Final number 1.")]
    track.feed([final(2, 34.0, 35.0)])  # a publisher back: live again, after the last
    track.reopen()
    assert "#EXT-X-ENDLIST" not in track.playlist(URI)
    track.advance(42.0)
    assert cues(track.segment(6) or "") == [(36.0, 37.0, "Final number 2.")]  # moved on


def test_an_empty_stream_that_ended_still_has_a_segment() -> None:
    track = LiveVttTrack()
    track.finish(0.0)
    assert track.playlist(URI).splitlines()[-3:] == ["#EXTINF:6.000,", "captions-0.vtt",
                                                     "#EXT-X-ENDLIST"]  # fmt: skip
    assert cues(track.segment(0) or "") == []


def test_master_playlist_names_the_subtitle_group() -> None:
    alone = master_playlist("captions.m3u8?token=t", name="main", language="en")
    lines = alone.splitlines()
    assert lines[:3] == ["#EXTM3U", "#EXT-X-VERSION:3",
                         '#EXT-X-MEDIA:TYPE=SUBTITLES,GROUP-ID="subs",NAME="main",DEFAULT=YES,'
                         'AUTOSELECT=YES,LANGUAGE="en",URI="captions.m3u8?token=t"']  # fmt: skip
    assert all(line.startswith("##") for line in lines[3:])  # how to add a video: comments
    video = VideoVariant("http://127.0.0.1:8000/video.m3u8", 800000, "320x240", "avc1.42e01e")
    with_video = master_playlist("captions.m3u8", name="main", video=video).splitlines()
    assert with_video[-2:] == [
        '#EXT-X-STREAM-INF:BANDWIDTH=800000,RESOLUTION=320x240,CODECS="avc1.42e01e",'
        'SUBTITLES="subs"',
        "http://127.0.0.1:8000/video.m3u8",
    ]


@pytest.mark.parametrize(
    "bad",
    [
        {"media_uri": 'a".m3u8', "name": "n"},
        {"media_uri": "a.m3u8", "name": "two\nlines"},
        {"media_uri": "a.m3u8", "name": "n", "video": VideoVariant("#EXTINF:1", 1)},
        {"media_uri": "a.m3u8", "name": "n", "video": VideoVariant("v.m3u8", 0)},
    ],
)
def test_what_a_playlist_cannot_hold_is_refused(bad: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        master_playlist(**bad)  # type: ignore[arg-type]


def test_the_timestamp_map_is_in_range() -> None:
    assert vtt_segment("", 2**33 - 1).startswith("WEBVTT\nX-TIMESTAMP-MAP=MPEGTS:8589934591,")
    with pytest.raises(ValueError):
        vtt_segment("", 2**33)
