"""Issue 39, item 3: the YouTube Live and Zoom caption sinks against a real HTTP receiver on
loopback (`sinkkit.Receiver`). The real services cannot be reached from here: the receiver
checks what their documents say a POST must be (YouTube: support.google.com/youtube/answer/
6077032; Zoom: support.zoom.us/hc/en-us/articles/115002212983) — the body, the ``seq``
numbering (one more per new caption, the same for a retry), the order, ``lang`` and the
content type — and the retries after a 500, bounded, then a `SinkError` that quotes no URL.
"""

from __future__ import annotations

import asyncio
import re
import time
from datetime import datetime, timezone

import pytest
from sinkkit import SECRET, receiver, silent_port

from streamcap.core.captions import Caption
from streamcap.sinks.base import SinkError, SinkSpec
from streamcap.sinks.http_post import RetryPolicy, with_query
from streamcap.sinks.youtube import StampClock, YouTubeSink, youtube_body, youtube_time
from streamcap.sinks.zoom import ZoomSink, seq_url

FAST = RetryPolicy(tries=3, first_wait_s=0.05, max_wait_s=0.2, timeout_s=2.0)
#: YouTube's documented time: 2012-12-24T00:00:06.873, UTC
STAMP_RE = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}")


def final(seq: int, text: str, start: float, speaker: str = "") -> Caption:
    return Caption("final", "main", seq, seq, text, start, start + 1.5, len(text), 400.0,
                   speaker=speaker)  # fmt: skip


def partial(seq: int) -> Caption:
    return Caption("partial", "main", seq, seq, "partial words", seq, seq + 0.5, 0, 100.0)


def deliver_all(sink: YouTubeSink | ZoomSink, caps: list[Caption]) -> None:
    async def go() -> None:
        try:
            for c in caps:
                await sink.deliver(c)
        finally:
            await sink.aclose()

    asyncio.run(go())


def test_youtube_time_and_body_are_as_documented() -> None:
    t = datetime(2012, 12, 24, 0, 0, 6, 873000, tzinfo=timezone.utc).timestamp()
    assert youtube_time(t) == "2012-12-24T00:00:06.873"
    assert youtube_time(t + 0.0004) == "2012-12-24T00:00:06.873"  # milliseconds, rounded
    body = youtube_body("2012-12-24T00:00:06.873", "I'M SENDING")
    assert body == "2012-12-24T00:00:06.873\nI'M SENDING\n"
    region = youtube_body("2012-12-24T00:00:06.873", "two\nlines", region="reg1#cue1")
    assert region == "2012-12-24T00:00:06.873 region:reg1#cue1\ntwo<br>lines\n"


def test_stamps_follow_the_stream_never_go_back_or_ahead() -> None:
    """The first final anchors the stream's clock to the wall clock; later ones keep their
    spacing; a jump (a publisher back after a pause) anchors again; never in the future."""
    clock = StampClock()
    now = 1_000_000.0
    a = clock.stamp(final(1, "a", 10.0), now)  # heard 0.4 s ago, 1.5 s long
    assert a == pytest.approx(now - 0.4 - 1.5)
    b = clock.stamp(final(2, "b", 12.0), now + 2.3)  # 2 s later in the stream: 2 s later
    assert b - a == pytest.approx(2.0)
    c = clock.stamp(final(3, "c", 14.0), now + 60)  # 56 s of wall time for 2 of stream: anew
    assert c == pytest.approx(now + 60 - 1.9)
    d = clock.stamp(final(4, "d", 13.0), now + 60)  # an overlapping speaker: not before c
    assert d > c and d <= now + 60


def test_youtube_posts_the_documented_format_in_order() -> None:
    with receiver() as rx:
        sink = YouTubeSink(SinkSpec("youtube", "main", rx.url()), retry=FAST)
        t0 = time.time()
        caps = [final(1, "Hello there.", 0.0), partial(2), final(3, "How are  you?", 2.0, "Mary")]
        deliver_all(sink, caps)
        posts = rx.posts()
    assert [p.seq for p in posts] == [1, 2]  # partials are not sent; seq grows by one
    for p in posts:
        assert p.path == "/closedcaption" and p.query["cid"] == ["abc"]
        assert p.query["sig"] == [SECRET]  # the given query reaches YouTube as it was
        assert p.headers["content-type"].startswith("text/plain")
        stamp, text, rest = p.body.decode("utf-8").split("\n")
        assert STAMP_RE.fullmatch(stamp) and rest == ""
        when = datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%f").replace(tzinfo=timezone.utc)
        assert t0 - 10 < when.timestamp() <= time.time()  # UTC, now-ish
    assert [p.body.decode().split("\n")[1] for p in posts] == ["Hello there.", "Mary: How are you?"]


def test_a_500_is_retried_with_the_same_seq() -> None:
    with receiver(fail_first=2) as rx:
        sink = YouTubeSink(SinkSpec("youtube", "main", rx.url()), retry=FAST)
        deliver_all(sink, [final(1, "One.", 0.0), final(2, "Two.", 1.0)])
        posts = rx.posts()
    assert [p.seq for p in posts] == [1, 1, 1, 2]  # two 500s, then taken: the same seq
    assert posts[0].body == posts[2].body
    assert sink.retried == 2


def test_bounded_tries_then_a_sink_error_without_the_url() -> None:
    with receiver(fail_first=100) as rx:
        sink = YouTubeSink(SinkSpec("youtube", "main", rx.url()), retry=FAST)

        async def go() -> None:
            try:
                with pytest.raises(SinkError) as info:
                    await sink.deliver(final(1, "Lost.", 0.0))
                assert str(info.value) == "HTTP 500 after 3 tries"
                await sink.deliver(final(2, "Next.", 1.0))  # new data: the next seq
            finally:
                await sink.aclose()

        with pytest.raises(SinkError):
            asyncio.run(go())
        assert [p.seq for p in rx.posts()] == [1, 1, 1, 2, 2, 2]


def test_a_service_that_never_answers_times_out_and_says_so() -> None:
    policy = RetryPolicy(tries=2, first_wait_s=0.01, timeout_s=0.5)
    with silent_port() as url:
        sink = YouTubeSink(SinkSpec("youtube", "main", url), retry=policy)

        async def go() -> float:
            t0 = time.monotonic()
            try:
                with pytest.raises(SinkError, match="TimeoutError after 2 tries") as info:
                    await sink.deliver(final(1, "Hello.", 0.0))
                assert SECRET not in str(info.value)
                return time.monotonic() - t0
            finally:
                await sink.aclose()

        took = asyncio.run(go())
    assert took < 5  # two tries of 0.5 s and a wait, not a hang


def test_zoom_posts_text_with_seq_and_lang() -> None:
    with receiver() as rx:
        spec = SinkSpec("zoom", "standup", rx.url(), (("lang", "de-DE"),))
        sink = ZoomSink(spec, retry=FAST)
        deliver_all(sink, [final(1, "Guten Morgen.", 0.0, "Ana"), partial(2), final(3, "Ja.", 2.0)])
        seen = list(rx.seen)
    get, *posts = seen
    assert get.method == "GET" and get.path == "/closedcaption/seq"  # Zoom's last seq, asked
    assert get.query["sig"] == [SECRET]
    assert [p.seq for p in posts] == [1, 2]  # Zoom did not say: a new meeting, from 1
    assert {p.query["lang"][0] for p in posts} == {"de-DE"}
    assert all(p.headers["content-type"] == "text/plain" for p in posts)
    assert [p.body.decode("utf-8") for p in posts] == ["Ana: Guten Morgen.", "Ja."]


def test_zoom_goes_on_after_the_seq_it_last_took() -> None:
    """A server restarted in the middle of a meeting: Zoom says it took seq 41, so the next
    caption is 42 (from 1 again, Zoom would take them for retries)."""
    with receiver(last_seq=41) as rx:
        sink = ZoomSink(SinkSpec("zoom", "standup", rx.url()), retry=FAST)
        deliver_all(sink, [final(1, "One.", 0.0), final(2, "Two.", 1.0)])
        assert [p.seq for p in rx.posts()] == [42, 43]
        assert rx.posts()[0].query["lang"] == ["en-US"]


def test_urls_keep_their_query_and_get_seq_and_lang() -> None:
    url = "https://wmcapi.zoom.us/closedcaption?id=200610693&ns=GZHkEA==&expire=86400&spparams=id%2Cns%2Cexpire&signature=nYtX"
    out = with_query(url, seq="7", lang="en-US")
    assert out == url + "&seq=7&lang=en-US"  # the signed part byte for byte
    assert with_query(out, seq="8", lang="en-US") == url + "&seq=8&lang=en-US"
    assert seq_url(url).startswith("https://wmcapi.zoom.us/closedcaption/seq?id=200610693&")


@pytest.mark.parametrize("bad", ["ftp://x/y", "not a url", "http:///nohost", "http://h:99999/"])
def test_a_bad_url_is_refused_without_being_quoted(bad: str) -> None:
    with pytest.raises(ValueError) as info:
        YouTubeSink(SinkSpec("youtube", "main", bad))
    assert bad not in str(info.value)
