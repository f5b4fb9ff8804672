"""Red-team round 4 (issue 35), recordings read back: bugs 2, 3, 8 and 13.

A real server on loopback (`ServerThread`) with a stand-in stream (no model: what is tested is
how the server reads its recordings back), recordings written as `--record DIR` writes them
(`recordkit`), real viewers and downloads. Each test names the bug it guards against; each
failed before the fix.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from recordkit import (
    EPOCH,
    LOUD,
    QUIET,
    Viewer,
    count_parses,
    many,
    record_server,
    settled,
    write_recording,
)
from serverkit import START, Collector, base, http_get, ingest
from websockets.sync.client import connect

from streamcap.core.captions import Caption
from streamcap.core.decode_types import WordTiming
from streamcap.formats import render_srt, render_vtt
from streamcap.server.client import ws_url
from streamcap.server.record import Recorder
from streamcap.server.subtitle_doc import SubtitleDoc

# --------------------------------------------------------------------------- bug 2


def test_a_resume_reads_only_the_finals_it_needs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bug 2: every viewer that resumed from before the in-memory window parsed the whole
    recording again (3 000 lines per viewer here)."""
    write_recording(tmp_path, "long", many("long", 3000))
    with record_server(tmp_path, recorded_memory_finals=50) as srv:
        first = Viewer(srv, "long")
        assert first.wait(3000), len(first.finals())
        first.close()
        count = count_parses(monkeypatch)
        for _ in range(5):
            v = Viewer(srv, "long", since=2900, epoch=EPOCH)
            assert v.wait(100), len(v.finals())
            assert [e["seq"] for e in v.finals()] == list(range(2901, 3001))
            v.close()
        assert settled(count) < 3000, count


def test_viewers_that_drop_at_once_cost_no_parse_of_the_whole_recording(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bug 2 (REPLAY-LOOP): each connection that asked for `since=0` and left at once still
    cost a parse of the whole recording, in a thread nobody waited for."""
    write_recording(tmp_path, "loop", many("loop", 3000))
    count = count_parses(monkeypatch)
    with record_server(tmp_path, recorded_memory_finals=50) as srv:
        url = ws_url(base(srv), "captions", "loop")
        for _ in range(20):
            with connect(url, compression=None):
                pass
        assert settled(count) < 2 * 3000, count


def test_a_live_streams_subtitles_are_rendered_per_new_final_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bug 2 (LIVE-LOOP): the render cache was keyed by the log's last seq, so every partial of
    a live stream re-rendered the whole file; a new final re-rendered all of it too."""
    import streamcap.formats.subtitles as formats  # where the subtitle writers plan cues

    planned = [0]
    real = formats.plan_cues

    def counted(*args: Any, **kw: Any) -> Any:
        planned[0] += 1
        return real(*args, **kw)

    monkeypatch.setattr(formats, "plan_cues", counted)
    with record_server(tmp_path) as srv, ingest(srv, "live", token=None) as pub:
        viewer = Collector(srv, "live", token=None)
        pub.send(json.dumps(START))
        assert json.loads(pub.recv(timeout=10))["type"] == "ready"
        for _ in range(3):
            pub.send(LOUD)
        assert viewer.wait_for(lambda v: len(v.finals()) == 3, 10)
        url = srv.url("/streams/live.srt")
        status, _, first = http_get(url)
        assert status == 200 and planned[0] == 3
        pub.send(QUIET)  # a partial: the subtitles are the same
        assert viewer.wait_for(lambda v: v.events[-1]["type"] == "partial", 10)
        assert http_get(url)[2] == first
        assert planned[0] == 3
        pub.send(LOUD)
        assert viewer.wait_for(lambda v: len(v.finals()) == 4, 10)
        status, _, body = http_get(url)
        assert planned[0] == 4  # only the new final's cues
        finals = [Caption.from_dict(e) for e in viewer.finals()]
        assert status == 200 and body == render_srt(finals)
        assert http_get(srv.url("/streams/live.vtt"))[2] == render_vtt(finals)
        viewer.stop()


def test_a_refused_download_costs_no_render(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bug 2: a download over its budget was rendered first and refused after (429 still cost
    the render), and every partial made a new render to refuse."""
    import streamcap.formats.subtitles as formats  # where the subtitle writers plan cues

    planned = [0]
    real = formats.plan_cues

    def counted(*args: Any, **kw: Any) -> Any:
        planned[0] += 1
        return real(*args, **kw)

    monkeypatch.setattr(formats, "plan_cues", counted)
    config = {"download_burst": 200.0, "download_rate": 1.0}
    with record_server(tmp_path, **config) as srv, ingest(srv, "tight", token=None) as pub:
        viewer = Collector(srv, "tight", token=None)
        pub.send(json.dumps(START))
        assert json.loads(pub.recv(timeout=10))["type"] == "ready"
        for _ in range(3):
            pub.send(LOUD)
        assert viewer.wait_for(lambda v: len(v.finals()) == 3, 10)
        url = srv.url("/streams/tight.srt")
        statuses = [http_get(url)[0]]
        pub.send(QUIET)
        assert viewer.wait_for(lambda v: v.events[-1]["type"] == "partial", 10)
        statuses.append(http_get(url)[0])
        pub.send(LOUD)
        assert viewer.wait_for(lambda v: len(v.finals()) == 4, 10)
        statuses.append(http_get(url)[0])
        viewer.stop()
    assert statuses == [200, 429, 429]
    assert planned[0] == 3  # the one download that was answered


def test_replays_spend_the_readers_byte_budget_per_address(tmp_path: Path) -> None:
    """Bug 2: a replay from the recording had no budget at all; one address that replays the
    whole recording is paced, another address is not held up by it."""
    write_recording(tmp_path, "paced", many("paced", 600, words=12))
    config = {"download_burst": 150_000.0, "download_rate": 10_000.0}
    with record_server(tmp_path, recorded_memory_finals=20, **config) as srv:
        hungry = Viewer(srv, "paced", source="127.0.0.1")
        assert hungry.wait(1, 30)
        t0 = time.monotonic()
        other = Viewer(srv, "paced", since=520, epoch=EPOCH, source="127.0.0.2")
        assert other.wait(80, 30), len(other.finals())
        time.sleep(2 * (time.monotonic() - t0) + 2.0)  # what `other` took, twice, and more
        assert len(hungry.finals()) < 600, "the whole recording went out at once"
        other.close()
        hungry.close()


# --------------------------------------------------------------------------- bug 3


def test_the_first_read_of_a_recording_runs_off_the_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bug 3 (REAL-FIRST): `Hub.get` read the recording on the event loop: every stream and
    `/healthz` waited for it."""
    # big enough that its load (about 1 s here) stands well above how late a /healthz answer
    # is on a busy 2-core machine anyway (up to 0.27 s seen beside a 0.34 s load of 4000 finals)
    write_recording(tmp_path, "big", many("big", 12000, words=12))
    loads: list[tuple[str, float]] = []
    real = Recorder.load

    def timed(self: Recorder, *args: Any, **kw: Any) -> Any:
        t0 = time.monotonic()
        try:
            return real(self, *args, **kw)
        finally:
            loads.append((threading.current_thread().name, time.monotonic() - t0))

    monkeypatch.setattr(Recorder, "load", timed)
    with record_server(tmp_path) as srv:
        assert http_get(srv.url("/healthz"))[0] == 200
        result: list[int] = []
        download = threading.Thread(
            target=lambda: result.append(http_get(srv.url("/streams/big.srt"), timeout=120)[0])
        )
        download.start()
        worst = 0.0
        while download.is_alive():
            t0 = time.monotonic()
            assert http_get(srv.url("/healthz"), timeout=60)[0] == 200
            worst = max(worst, time.monotonic() - t0)
            time.sleep(0.02)
        download.join()
    assert result == [200]
    assert len(loads) == 1 and loads[0][0] != "caption-server", loads
    assert worst < 0.5 * loads[0][1], (worst, loads)


def test_concurrent_first_requests_share_one_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bug 3: the read moved off the loop must still happen once for requests that come
    together (it passed before the fix too, when the loop serialised them)."""
    write_recording(tmp_path, "shared", many("shared", 2000, words=12))
    calls = [0]
    real = Recorder.load

    def counted(self: Recorder, *args: Any, **kw: Any) -> Any:
        calls[0] += 1
        return real(self, *args, **kw)

    monkeypatch.setattr(Recorder, "load", counted)
    with record_server(tmp_path) as srv:
        statuses: list[int] = []
        url = srv.url("/streams/shared.vtt")
        threads = [
            threading.Thread(target=lambda: statuses.append(http_get(url, timeout=120)[0]))
            for _ in range(4)
        ]
        for t in threads:
            t.start()
        viewer = Viewer(srv, "shared")
        for t in threads:
            t.join()
        assert viewer.wait(2000)
        viewer.close()
    assert statuses == [200] * 4 and calls[0] == 1


def test_cycling_through_more_recordings_than_are_retained_reads_each_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bug 3 (RETAIN-CYCLE): a stream dropped from memory (`--retain-streams`) was read back
    whole at its next request, so cycling through more ids than that read every file every
    time."""
    ids = [f"r{i}" for i in range(6)]
    for s in ids:
        write_recording(tmp_path, s, many(s, 300))
    with record_server(tmp_path, retain_streams=2, recorded_memory_finals=20) as srv:
        for s in ids:
            assert http_get(srv.url(f"/streams/{s}.srt"), timeout=60)[0] == 200
        count = count_parses(monkeypatch)
        for s in ids:
            assert http_get(srv.url(f"/streams/{s}.srt"), timeout=60)[0] == 200
        assert settled(count) < len(ids) * 300 / 2, count


# --------------------------------------------------------------------------- bug 2: appending


SPEAKERS = st.sampled_from(["", "", "Ana", "Bo"])


@st.composite
def _finals(draw: st.DrawFn) -> list[Caption]:
    """Finals in seq order as a stream or a room makes them: mostly one after the other, now
    and then one that starts inside the last (a room's speakers overlapping)."""
    out: list[Caption] = []
    t = 0.0
    for seq in range(1, draw(st.integers(1, 12)) + 1):
        t += draw(st.floats(-1.5, 3.0))
        t = max(t, 0.0)
        length = draw(st.floats(0.0, 4.0))
        n = draw(st.integers(0, 14))
        words = tuple(
            WordTiming(
                f"w{seq}x{k}.", t + length * k / max(n, 1), t + length * (k + 1) / max(n, 1), 0.9
            )
            for k in range(n)
        )
        text = " ".join(w.word for w in words) if words and draw(st.booleans()) else "word " * n
        out.append(
            Caption(
                "final",
                "s",
                seq,
                seq,
                text,
                t,
                t + length,
                len(text),
                1.0,
                "e",
                words=words,
                speaker=draw(SPEAKERS),
            )  # fmt: skip
        )
    return out


@settings(max_examples=300, deadline=None)
@given(finals=_finals(), cut=st.integers(0, 12), kind=st.sampled_from(["srt", "vtt"]))
def test_appending_finals_makes_the_file_a_whole_render_makes(
    finals: list[Caption], cut: int, kind: str
) -> None:
    """Bug 2: a live stream's file is extended with each new final instead of made again; it
    must be exactly what `render_srt` / `render_vtt` make of all the finals."""
    whole = (render_vtt if kind == "vtt" else render_srt)(finals).encode()
    doc = SubtitleDoc.render(kind, "e", finals[:cut])
    if not doc.extend(finals[cut:]):
        doc = SubtitleDoc.render(kind, "e", finals)  # what the server does then
    assert doc.body == whole
    assert doc.through == finals[-1].seq
