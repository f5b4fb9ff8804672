"""A stream's captions as a live HLS subtitle rendition (RFC 8216): short WebVTT segments, the
media playlist that lists them, and a master playlist that names it ``TYPE=SUBTITLES``.

Segment ``i`` covers stream seconds ``[i * target_s, (i + 1) * target_s)`` and holds every cue
that overlaps that span, with its own times (a cue across a boundary is in both segments, as
Apple's segmenter writes them; players drop the repeat). Each segment says where its times lie
on the video's clock with ``X-TIMESTAMP-MAP=MPEGTS:<ticks>,LOCAL:00:00:00.000``: stream second 0
is at ``mpegts`` (90 kHz ticks) of the video's timestamps.

A segment is written once and never changes, so it is published only when no final can still
land in it (`advance`): the stream's clock less a margin, and never past the start of an
utterance still being spoken (its partial, in the log until its final comes). A final that
comes all the same after its segment went out (a decode that lagged) is shown from the first
segment not yet published (its cues moved later, never lost). The live playlist lists the
newest `window` segments (``EXT-X-MEDIA-SEQUENCE`` counts those that slid out) and, when the
stream has ended (`finish`), ``#EXT-X-ENDLIST``.

The cues are the subtitle files' (`cues.plan_cues`: line width and count, timed by the words),
with the speaker as a ``<v Name>`` voice span, as `formats.subtitles.VttWriter` writes them.
Pure: captions and times in, text out (`server/hls.py` serves it).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from streamcap.core.captions import Caption
from streamcap.cues import DEFAULT_CUES, CueStyle, plan_cues, vtt_escape
from streamcap.formats.base import format_vtt_time

__all__ = ["LiveVttTrack", "VideoVariant", "master_playlist", "vtt_segment"]

#: Seconds a segment covers (``EXT-X-TARGETDURATION``): short, for captions that keep up.
TARGET_S = 6
#: Segments a live playlist lists (3 minutes): players start 3 segments from the live edge.
WINDOW = 30
#: MPEG-TS timestamps tick at 90 kHz; they wrap at 2**33.
MPEGTS_HZ = 90_000
MPEGTS_WRAP = 2**33
#: An utterance is a window of at most 30 s (`core.policy_config.PolicyConfig.max_window_s`):
#: a partial older than this, with time to decode its final, has no final coming.
OPEN_AT_MOST_S = 45.0
#: The subtitle group a master playlist names (a video variant's ``SUBTITLES="subs"``).
GROUP_ID = "subs"


@dataclass(frozen=True)
class _Cue:
    start: float
    end: float
    text: str  # its lines, escaped, with the voice span


def vtt_segment(cues: str, mpegts: int = 0) -> str:
    """A segment's WebVTT text: the header with its timestamp map, then `cues`."""
    if not 0 <= mpegts < MPEGTS_WRAP:
        raise ValueError(f"MPEGTS must be 0 to 2**33 - 1, got {mpegts}")
    return f"WEBVTT\nX-TIMESTAMP-MAP=MPEGTS:{mpegts},LOCAL:00:00:00.000\n\n{cues}"


class LiveVttTrack:
    """One stream's live WebVTT rendition (see the module docstring). Fed the stream's log
    in seq order (`feed`), moved on by its clock (`advance`) or its end (`finish`); not
    thread-safe."""

    def __init__(
        self, *, target_s: int = TARGET_S, window: int = WINDOW, style: CueStyle = DEFAULT_CUES
    ) -> None:
        if target_s < 1 or window < 1:
            raise ValueError("target_s and window must be at least 1")
        self.target_s = target_s
        self.window = window
        self.style = style
        #: the log's events are fed through this seq
        self.fed_seq = 0
        #: the stream has ended: every segment is out, the playlist says ``#EXT-X-ENDLIST``
        self.ended = False
        self._open: dict[int, float] = {}  # segment -> start of its partial (being spoken)
        self._cues: list[_Cue] = []  # cues that reach into segments not yet published
        self._published = 0  # segments [0, _published) are out
        self._segments: dict[int, str] = {}  # the newest published ones: index -> cues' text
        self.late_finals = 0  # finals that came after their segment was out (moved later)

    @property
    def published(self) -> int:
        """Segments published so far."""
        return self._published

    @property
    def published_s(self) -> float:
        """Where the published segments end, in stream seconds."""
        return float(self._published * self.target_s)

    @property
    def media_sequence(self) -> int:
        """The first segment the live playlist lists."""
        return max(0, self._published - self.window)

    def feed(self, captions: Iterable[Caption]) -> None:
        """The stream's log from where it was fed (seq order; events at or before `fed_seq`
        are skipped): partials mark an utterance being spoken, finals become cues."""
        for c in captions:
            if c.seq <= self.fed_seq:
                continue
            self.fed_seq = c.seq
            if c.type == "partial":
                self._open[c.segment] = c.start
                continue
            self._open.pop(c.segment, None)
            if c.text.strip():
                self._add(c)

    def _add(self, c: Caption) -> None:
        shift = max(0.0, self.published_s - c.start)  # too late for its segment: shown later
        if shift:
            self.late_finals += 1
        voice = f"<v {vtt_escape(c.speaker)}>" if c.speaker else ""
        s = self.style
        for t0, t1, lines, _ in plan_cues(c.text, c.start, c.end, s.width, s.lines, c.words):
            text = "\n".join([voice + vtt_escape(lines[0]), *map(vtt_escape, lines[1:])])
            self._cues.append(_Cue(t0 + shift, max(t1, t0) + shift, text))

    def settled_s(self, now_s: float, margin_s: float) -> float:
        """Up to where no final can still start, as of the stream's clock `now_s`: `margin_s`
        before it, and not past an utterance still being spoken. A partial older than
        `OPEN_AT_MOST_S` is no longer waited for (its final was dropped: the hallucination
        guard, a publisher gone)."""
        stale = now_s - OPEN_AT_MOST_S
        self._open = {k: t for k, t in self._open.items() if t > stale}
        return min([now_s - margin_s, *self._open.values()])

    def advance(self, settled_s: float) -> None:
        """Publish every segment that ends by `settled_s` (stream seconds)."""
        if self.ended or not math.isfinite(settled_s):
            return
        while (self._published + 1) * self.target_s <= settled_s:
            self._publish()

    def finish(self, end_s: float) -> None:
        """The stream has ended at `end_s`: every segment through its last cue is published
        (whole: a publisher that comes back goes on at the next), and the playlist ends."""
        if self.ended:
            return
        last = max([end_s, *(c.end for c in self._cues)])
        while self.published_s < last or not self._published:
            self._publish()
        self._open.clear()
        self.ended = True

    def reopen(self) -> None:
        """A publisher came back after `finish`: the playlist is live again."""
        self.ended = False

    def _publish(self) -> None:
        i = self._published
        t0, t1 = i * self.target_s, (i + 1) * self.target_s
        mine = [c for c in self._cues if c.start < t1 and (c.end > t0 or c.start >= t0)]
        mine.sort(key=lambda c: (c.start, c.end))
        self._segments[i] = "".join(
            f"{format_vtt_time(c.start)} --> {format_vtt_time(c.end)}\n{c.text}\n\n" for c in mine
        )
        self._published = i + 1
        self._cues = [c for c in self._cues if c.end > t1 or c.start >= t1]
        for old in [k for k in self._segments if k < i + 1 - 2 * self.window]:
            del self._segments[old]  # out of the window long enough: nobody asks any more

    def segment(self, index: int, mpegts: int = 0) -> str | None:
        """Segment `index` as WebVTT, or None when it is not (or no longer) there."""
        cues = self._segments.get(index)
        return None if cues is None else vtt_segment(cues, mpegts)

    def playlist(self, uri: Callable[[int], str]) -> str:
        """The live media playlist: the newest `window` segments, each at ``uri(index)``."""
        first = self.media_sequence
        lines = [
            "#EXTM3U",
            "#EXT-X-VERSION:3",
            f"#EXT-X-TARGETDURATION:{self.target_s}",
            f"#EXT-X-MEDIA-SEQUENCE:{first}",
        ]
        for i in range(first, self._published):
            lines += [f"#EXTINF:{self.target_s:.3f},", _line(uri(i), "a segment's URI")]
        if self.ended:
            lines.append("#EXT-X-ENDLIST")
        return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class VideoVariant:
    """A video rendition to list beside the captions: its media playlist's URI and what
    ``EXT-X-STREAM-INF`` says of it (``BANDWIDTH`` is required; the rest optional)."""

    uri: str
    bandwidth: int
    resolution: str = ""  # "1280x720"
    codecs: str = ""  # "avc1.42e01e,mp4a.40.2"


def master_playlist(
    media_uri: str, *, name: str, language: str = "", video: VideoVariant | None = None
) -> str:
    """A master playlist naming the captions at `media_uri` as the subtitle group
    ``"subs"`` (default, autoselected), with `video` as a variant that shows them; without
    one, comments say how a packager lists its own video beside them."""
    attrs = [
        "TYPE=SUBTITLES",
        f'GROUP-ID="{GROUP_ID}"',
        f'NAME="{_quoted(name, "NAME")}"',
        "DEFAULT=YES",
        "AUTOSELECT=YES",
    ]
    if language:
        attrs.append(f'LANGUAGE="{_quoted(language, "LANGUAGE")}"')
    attrs.append(f'URI="{_quoted(media_uri, "URI")}"')
    lines = ["#EXTM3U", "#EXT-X-VERSION:3", "#EXT-X-MEDIA:" + ",".join(attrs)]
    if video is None:
        lines += [
            "## streamcap: the captions as a subtitle rendition. A video variant shows them",
            f'## with SUBTITLES="{GROUP_ID}" (beside this line, or in your own master):',
            f'## #EXT-X-STREAM-INF:BANDWIDTH=2000000,SUBTITLES="{GROUP_ID}"',
            "## video/index.m3u8",
        ]
        return "\n".join(lines) + "\n"
    if video.bandwidth < 1:
        raise ValueError("BANDWIDTH must be at least 1")
    inf = [f"BANDWIDTH={video.bandwidth}"]
    if video.resolution:
        inf.append(f"RESOLUTION={_quoted(video.resolution, 'RESOLUTION')}")
    if video.codecs:
        inf.append(f'CODECS="{_quoted(video.codecs, "CODECS")}"')
    inf.append(f'SUBTITLES="{GROUP_ID}"')
    lines += ["#EXT-X-STREAM-INF:" + ",".join(inf), _line(video.uri, "the video's URI")]
    return "\n".join(lines) + "\n"


def _quoted(value: str, what: str) -> str:
    """`value` as a quoted attribute may hold it (RFC 8216 4.2: no ``"``, CR or LF)."""
    if not value or any(c in value for c in '"\r\n') or not value.isprintable():
        raise ValueError(f"{what} cannot be written in a playlist: {value!r}")
    return value


def _line(value: str, what: str) -> str:
    """`value` as a URI line: printable, no spaces, not a tag or comment."""
    if not value or value.startswith("#") or not value.isprintable() or " " in value:
        raise ValueError(f"{what} cannot be written in a playlist: {value!r}")
    return value
