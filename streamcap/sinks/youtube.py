"""YouTube Live's closed captions over HTTP: a stream's finals posted to the broadcast's
caption ingestion URL (YouTube Studio: "Closed captions" > "POST captions to URL").

As YouTube documents it ("Closed Captions over HTTP for YouTube Live Streams",
support.google.com/youtube/answer/6077032): a continuous sequence of POSTs to that URL, each
with a ``seq`` query parameter that grows by one for each POST of new caption data and stays
the same for a retry; a plain-text UTF-8 body of a time line and a text line per caption,
``YYYY-MM-DDTHH:MM:SS.mmm`` in UTC with an optional ``region:reg1#cue1`` after it, a line
break inside the text written ``<br>``. Finals only (YouTube shows what it is sent; a partial
would be shown and then repeated), in order, retried with backoff (`http_post.RetryPolicy`);
the URL never reaches a log.

The time of a caption is when its words were said, in UTC: the stream's seconds are mapped
to the wall clock at the first final (its arrival, less its latency and its length) and
again whenever the two drift apart by more than `REANCHOR_S` (a publisher that paused and
came back), never earlier than the previous caption's and never in the future.
"""

from __future__ import annotations

import time
from datetime import datetime, timezone

from streamcap.core.captions import Caption

from .base import SinkSpec
from .http_post import HttpPoster, RetryPolicy, check_http_url, spoken_text, with_query

__all__ = ["StampClock", "YouTubeSink", "youtube_body", "youtube_time"]

#: The stream's clock and the wall clock drift apart by more than this: map them again.
REANCHOR_S = 5.0
_REGION_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789#_-")


def youtube_time(t: float) -> str:
    """`t` (seconds since the epoch) as YouTube's caption time: ``2012-12-24T00:00:06.873``,
    UTC, milliseconds."""
    d = datetime.fromtimestamp(round(t, 3), tz=timezone.utc)
    return d.strftime("%Y-%m-%dT%H:%M:%S.") + f"{d.microsecond // 1000:03d}"


def youtube_body(stamp: str, text: str, region: str = "") -> str:
    """One caption as a POST body: its time line (``region:...`` after it if given), its
    text on one line (a line break written ``<br>``), and a newline."""
    line = "<br>".join(part.strip() for part in text.splitlines() if part.strip())
    head = f"{stamp} region:{region}" if region else stamp
    return f"{head}\n{line}\n"


class StampClock:
    """Stream seconds to the wall clock (see the module docstring)."""

    def __init__(self) -> None:
        self._anchor: float | None = None  # wall time of stream second 0
        self._last = -float("inf")

    def stamp(self, caption: Caption, now: float) -> float:
        """When `caption`'s words began, in seconds since the epoch, as of `now`."""
        said = now - max(0.0, caption.latency_ms) / 1000 - max(0.0, caption.end - caption.start)
        if self._anchor is None or abs(self._anchor + caption.start - said) > REANCHOR_S:
            self._anchor = said - caption.start
        t = min(max(self._anchor + caption.start, self._last + 0.001), now)
        self._last = t
        return t


def check_region(region: str) -> None:
    if region and (len(region) > 32 or not set(region) <= _REGION_CHARS):
        raise ValueError("a YouTube caption region is letters, digits, # _ - (e.g. reg1#cue1)")


class YouTubeSink:
    """Posts one stream's finals to YouTube Live (see the module docstring). ``spec``: the
    caption ingestion URL as its target; options ``region`` (e.g. ``reg1#cue1``), ``tries`` and
    ``timeout`` (`http_post.RetryPolicy.of`)."""

    wants_partials = False

    def __init__(self, spec: SinkSpec, *, retry: RetryPolicy | None = None) -> None:
        check_http_url(spec.target)
        self.region = spec.option("region")
        check_region(self.region)
        self._name = spec.label
        self._url = spec.target
        self._next_seq = 1
        self._clock = StampClock()
        self._http = HttpPoster(self._name, retry or RetryPolicy.of(spec.options))

    @property
    def name(self) -> str:
        return self._name

    @property
    def retried(self) -> int:
        """Posts that failed and were tried again."""
        return self._http.retried

    async def deliver(self, caption: Caption) -> None:
        if caption.type != "final" or not caption.text.strip():
            return
        stamp = youtube_time(self._clock.stamp(caption, time.time()))
        body = youtube_body(stamp, spoken_text(caption), self.region).encode("utf-8")
        seq, self._next_seq = self._next_seq, self._next_seq + 1  # new data: the next seq
        url = with_query(self._url, seq=str(seq))
        await self._http.post(url, body, "text/plain; charset=utf-8")

    async def aclose(self) -> None:
        await self._http.aclose()
