"""Issue 39, item 3, through a real server on loopback: a stream's finals reach its YouTube and
Zoom sinks (a real HTTP receiver standing in for the services, which cannot be reached from
here) as viewers see them, renames included; /metrics counts them; the caption URL is in no
log line; and a sink whose service never answers slows neither another stream's viewers nor
that stream's own sink (measured: the latency from a publisher's frame to a viewer's final,
with and without a stuck sink on another stream). The streams are stand-ins (no model):
what is under test is the server's side.
"""

from __future__ import annotations

import json
import statistics
import time
import urllib.request

from serverkit import FakeWorker
from sinkkit import (
    FRAME,
    SECRET,
    TimedViewer,
    all_logs,
    ingest_url,
    receiver,
    silent_port,
    start_json,
    timed_factory,
)
from websockets.sync.client import connect

from streamcap.server.config import ServerConfig
from streamcap.server.thread import ServerThread
from streamcap.sinks.base import SinkSpec


def server(*sinks: SinkSpec) -> ServerThread:
    # no flood guard: the stand-in publishers send frames faster than real time
    config = ServerConfig(port=0, admission=False, burst_s=None, sinks=sinks)
    return ServerThread(config, FakeWorker(), stream_factory=timed_factory)


def publish(srv: ServerThread, stream: str, n: int, prompt: str = "") -> None:
    with connect(ingest_url(srv, stream)) as ws:
        ws.send(start_json(prompt))
        assert json.loads(ws.recv(timeout=10))["type"] == "ready"
        for _ in range(n):
            ws.send(FRAME)
        ws.send(json.dumps({"type": "stop"}))
        for _ in ws:
            pass


def rename(srv: ServerThread, stream: str, names: dict[str, str]) -> None:
    req = urllib.request.Request(
        srv.url(f"/streams/{stream}/names"), data=json.dumps(names).encode(),
        headers={"Content-Type": "application/json"},
    )  # fmt: skip
    with urllib.request.urlopen(req, timeout=10) as r:
        assert r.status == 200


def test_finals_reach_youtube_and_zoom_as_viewers_see_them() -> None:
    with receiver() as yt, receiver() as zm, all_logs() as logs:
        sinks = (
            SinkSpec("youtube", "main", yt.url()),
            SinkSpec("zoom", "main", zm.url(), (("lang", "en-US"),)),
        )
        config = ServerConfig(port=0, admission=False, sinks=sinks)
        assert SECRET not in repr(config)  # a configuration printed or logged shows no URL
        with ServerThread(config, FakeWorker(), stream_factory=timed_factory) as srv:
            viewer = TimedViewer(srv, "main")
            publish(srv, "main", 2, prompt="labelled")
            assert len(yt.wait_posts(2)) == 2 and len(zm.wait_posts(2)) == 2
            rename(srv, "main", {"Speaker 2": "Mary"})
            publish(srv, "main", 2, prompt="labelled")
            yt_posts, zm_posts = yt.wait_posts(4), zm.wait_posts(4)
            with urllib.request.urlopen(srv.url("/metrics"), timeout=10) as r:
                metrics = r.read().decode()
            viewer.close()
        shown = [f"{e['speaker']}: {e['text']}" for _, e in viewer.finals()]
    assert shown == [
        "Speaker 1: final 0.",
        "Speaker 2: final 1.",
        "Speaker 1: final 0.",
        "Mary: final 1.",
    ]  # fmt: skip  (a new session's stand-in counts from 0)
    assert [p.body.decode().split("\n")[1] for p in yt_posts] == shown
    assert [p.body.decode() for p in zm_posts] == shown
    assert [p.seq for p in yt_posts] == [1, 2, 3, 4] and [p.seq for p in zm_posts] == [1, 2, 3, 4]
    assert 'streamcap_sink_captions_total{sink="youtube",stream="main",type="final"} 4.0' in metrics
    assert 'streamcap_sink_captions_total{sink="zoom",stream="main",type="final"} 4.0' in metrics
    assert 'streamcap_sink_waiting{sink="youtube",stream="main"} 0.0' in metrics
    assert SECRET not in logs.text() and "closedcaption" not in logs.text()


def test_failures_are_retried_logged_and_counted_without_the_url() -> None:
    """A service that answers 500 twice, then takes the caption: retried with the same seq;
    one that never answers: its finals fail after the tries, logged by the sink's name and
    the reason, counted; the URL in neither case anywhere in the logs."""
    with receiver(fail_first=2) as flaky, silent_port() as dead, all_logs() as logs:
        quick = (("tries", "2"), ("timeout", "0.3"))  # the test need not wait 5 x 10 s
        sinks = (SinkSpec("youtube", "flaky", flaky.url()), SinkSpec("zoom", "dead", dead, quick))
        with server(*sinks) as srv:
            assert srv.server is not None
            publish(srv, "flaky", 1)
            publish(srv, "dead", 1)
            posts = flaky.wait_posts(3)
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                figs = {f.name: f for f in srv.server.sinks.figures()}
                if figs["zoom:dead"].failed_finals and figs["youtube:flaky"].delivered_finals:
                    break
                time.sleep(0.05)
            with urllib.request.urlopen(srv.url("/metrics"), timeout=10) as r:
                metrics = r.read().decode()
    assert [p.seq for p in posts] == [1, 1, 1]
    assert figs["youtube:flaky"].delivered_finals == 1 and figs["zoom:dead"].failed_finals == 1
    assert 'streamcap_sink_failures_total{sink="zoom",stream="dead",type="final"} 1.0' in metrics
    text = logs.text()
    said = "caption sink zoom:dead: a final (seq 1) was not delivered: TimeoutError after 2 tries"
    assert said in text
    leaks = [line for line in text.splitlines() if SECRET in line or "closedcaption" in line]
    assert not leaks, leaks


def latencies(srv: ServerThread, stream: str, n: int) -> list[float]:
    """Seconds from a publisher's frame to a viewer's final, for `n` finals one after the other."""
    viewer = TimedViewer(srv, stream)
    out = []
    with connect(ingest_url(srv, stream)) as ws:
        ws.send(start_json())
        assert json.loads(ws.recv(timeout=10))["type"] == "ready"
        for k in range(n):
            t0 = time.monotonic()
            ws.send(FRAME)
            got = viewer.wait_finals(k + 1)
            out.append(got[k][0] - t0)
    viewer.close()
    return out


def test_a_sink_that_never_answers_slows_no_other_stream() -> None:
    """Stream "a" posts to a service that never answers, its publisher sending all along;
    stream "b"'s viewer latency is measured with that going on and without it (the same
    server otherwise), and b's own YouTube sink still gets every final at once."""
    n = 60
    with receiver() as rx, silent_port() as dead:
        with server(SinkSpec("youtube", "b", rx.url())) as srv:
            before = latencies(srv, "b", n)
        sinks = (SinkSpec("zoom", "a", dead), SinkSpec("youtube", "b", rx.url()))
        with server(*sinks) as srv, connect(ingest_url(srv, "a")) as pub_a:
            pub_a.send(start_json())
            json.loads(pub_a.recv(timeout=10))
            for _ in range(50):  # a's sink is stuck on its first final, 49 wait behind it
                pub_a.send(FRAME)
            after = latencies(srv, "b", n)
            assert srv.server is not None
            stuck = {f.name: f for f in srv.server.sinks.figures()}["zoom:a"]
            assert stuck.busy_s > 0 and stuck.waiting >= 40 and stuck.delivered_finals == 0
        got = rx.wait_posts(2 * n)
    b50, b95 = statistics.median(before), sorted(before)[int(0.95 * n)]
    a50, a95 = statistics.median(after), sorted(after)[int(0.95 * n)]
    print(f"\nstream b, frame->viewer final: without a stuck sink p50 {b50 * 1000:.1f} ms "
          f"p95 {b95 * 1000:.1f} ms; with one on stream a p50 {a50 * 1000:.1f} ms "
          f"p95 {a95 * 1000:.1f} ms")  # fmt: skip
    assert len(got) == 2 * n  # b's own sink had every final of both runs
    assert a50 < b50 + 0.05 and a95 < b95 + 0.25  # the stuck sink costs b nothing to speak of
