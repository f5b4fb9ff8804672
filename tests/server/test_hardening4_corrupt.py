"""Red-team round 4 (issue 35), recordings that are not what the server wrote: bugs 8 and 13.

A recording's folder can hold a hand-edited, foreign or damaged file, or something that is not
a file at all. What comes back from it is checked as a client's input (numbers, epochs, text),
and only regular files are opened, never on the event loop. A real server on loopback with a
stand-in stream (`recordkit`); each test names the bug it guards against; each failed before
the fix.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from recordkit import EPOCH, LOUD, Viewer, final, record_server, strict_json, write_recording
from serverkit import START, http_get, ingest

from streamcap.core.captions import Caption
from streamcap.core.decode_types import WordTiming
from streamcap.formats import JsonlWriter, SrtWriter, TxtWriter, VttWriter, render_srt, render_vtt
from streamcap.server.request import EPOCH_RE
from streamcap.server.thread import ServerThread

#: JavaScript's exact integers: a seq beyond them cannot come back as `since`
JS_SAFE = 2**53 - 1


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    with record_server(tmp_path_factory.mktemp("rec")) as s:
        yield s


def _root(srv: ServerThread) -> Path:
    assert srv.config.record_dir is not None
    return srv.config.record_dir


def _bad(**fields: Any) -> dict[str, Any]:
    """Seq 2 of a recording with `fields` changed (its text says BAD, unless replaced)."""
    d = final("x", 2, text="BAD line", words=3).to_dict()
    for key, value in fields.items():
        if key.startswith("word_"):
            d["words"][1][key[5:]] = value
        else:
            d[key] = value
    return d


BAD_LINES = {
    "start-nan": _bad(start=math.nan, end=math.nan),
    "end-inf": _bad(end=math.inf),
    "end-huge": _bad(end=1e308),
    "start-negative": _bad(start=-5.0),
    "end-before-start": _bad(start=5.0, end=2.5),
    "seq-huge": _bad(seq=10**20),
    "seq-string": _bad(seq="2"),
    "seq-bool": _bad(seq=True),
    "seq-float": _bad(seq=2.5),
    "segment-huge": _bad(segment=10**20),
    "epoch-bad": _bad(epoch="not an epoch!"),
    "latency-nan": _bad(latency_ms=math.nan),
    "committed-negative": _bad(committed_chars=-1),
    "word-start-nan": _bad(word_start=math.nan),
    "word-end-before-start": _bad(word_start=3.0, word_end=2.0),
    "word-probability": _bad(word_probability=5.0),
    "word-rlo": _bad(word_word="w\u202e1"),
    "text-rlo": _bad(text="BAD \u202eline"),
    "text-escape": _bad(text="BAD \x1b[31mline"),
    "text-not-a-string": _bad(text=["BAD"]),
}


# --------------------------------------------------------------------------- bug 8


@pytest.mark.parametrize("case", sorted(BAD_LINES))
def test_a_recorded_line_with_impossible_values_is_skipped(srv: ServerThread, case: str) -> None:
    """Bug 8: `Caption.from_dict` took NaN, Infinity, 1e308, any seq and epoch, and text
    with bidi overrides from a recording: subtitles answered 500 from then on, viewers got
    `NaN` that `JSON.parse` refuses, and the room's clock and seqs jumped to the bad values."""
    stream = f"bad-{case}"
    good = [final(stream, 1, text="good one", words=3), final(stream, 3, text="good three")]
    bad = {**BAD_LINES[case], "stream": stream}
    write_recording(_root(srv), stream, [good[0], bad, good[1]])
    status, _, body = http_get(srv.url(f"/streams/{stream}.srt"))
    assert status == 200, body
    assert "good one" in body and "good three" in body and "BAD" not in body
    viewer = Viewer(srv, stream)
    try:
        assert viewer.wait(2, 10)
        assert [e["seq"] for e in viewer.events] == [1, 3]
        assert {e["epoch"] for e in viewer.events} == {EPOCH}  # one bad line renumbers nothing
    finally:
        viewer.close()


def _publish_one(srv: ServerThread, stream: str) -> None:
    with ingest(srv, stream, token=None) as ws:
        ws.send(json.dumps(START))
        assert json.loads(ws.recv(timeout=10))["type"] == "ready"
        ws.send(LOUD)
        ws.send(json.dumps({"type": "stop"}))
        with contextlib.suppress(Exception):
            while True:
                ws.recv(timeout=10)
        assert ws.close_code == 1000, ws.close_reason


KEPT = ["final 1", "final 3"]


@pytest.mark.parametrize(
    ("case", "epoch", "reserved", "extra", "kept"),
    [
        ("reserved-huge", EPOCH, 10**20, None, KEPT),
        ("epoch-bad", "not an epoch!", 3, None, []),  # every line's epoch is broken
        ("time-huge", EPOCH, 3, _bad(seq=2, end=1e308, start=1.0), KEPT),
    ],
)
def test_numbering_and_times_continue_only_from_values_viewers_can_use(
    srv: ServerThread,
    case: str,
    epoch: str,
    reserved: Any,
    extra: dict[str, Any] | None,
    kept: list[str],
) -> None:
    """Bug 8: a `.seq.json` reserving 10^20 (or an epoch outside what `epoch=` accepts) was
    trusted, so every new event carried a seq (or epoch) a viewer could not resume with (1003);
    a final ending at 1e308 moved the room's clock there. Such a log starts a new epoch."""
    stream = f"cont-{case}"
    lines: list[Any] = [final(stream, 1, epoch=epoch), final(stream, 3, epoch=epoch)]
    if extra is not None:
        lines.insert(1, {**extra, "stream": stream})
    write_recording(_root(srv), stream, lines, epoch=epoch, reserved=reserved)
    _publish_one(srv, stream)
    viewer = Viewer(srv, stream)
    try:
        assert viewer.wait(len(kept) + 1, 10), viewer.events
        events = viewer.finals()
    finally:
        viewer.close()
    assert [e["text"] for e in events] == [*kept, "final 0."]
    last = events[-1]
    assert EPOCH_RE.fullmatch(last["epoch"]) and 0 < last["seq"] <= JS_SAFE
    assert (3.0 if kept else 0.0) <= last["start"] < 1000.0  # not after 1e308
    resumed = Viewer(srv, stream, since=last["seq"], epoch=last["epoch"])
    try:
        assert not resumed.wait(1, 1.0) and resumed.closed is None  # accepted, nothing new
    finally:
        resumed.close()


WRITERS = (SrtWriter, VttWriter, TxtWriter, JsonlWriter)


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, 1e308])
def test_the_writers_never_crash_on_a_time_that_is_not_finite(value: float) -> None:
    """Bug 8, defence in depth: `cues.ms` raised OverflowError / ValueError on such a time."""
    import io

    words = (WordTiming("a", 0.0, value, 0.9), WordTiming("b", value, 1.0, 0.9))
    caps = [
        Caption("final", "s", 1, 0, "a b", 0.0, value, 3, 1.0, "e", words=words),
        Caption("final", "s", 2, 1, "c d", value, value, 3, 1.0, "e"),
    ]
    for cls in WRITERS:
        with cls(io.StringIO()) as w:
            w.write_all(caps)
    assert render_srt(caps) and render_vtt(caps)


# --------------------------------------------------------------------------- bug 13


@contextlib.contextmanager
def _fifo(path: Path, *, reader: bool) -> Iterator[None]:
    """A FIFO at `path`; on the way out it is opened from the other side once (so a server
    blocked on it before the fix gets going again and the test can end), then removed."""
    os.mkfifo(path)
    try:
        yield
    finally:
        flags = (os.O_RDONLY if reader else os.O_WRONLY) | os.O_NONBLOCK
        with contextlib.suppress(OSError):
            os.close(os.open(path, flags))
        path.unlink()


def _healthz_answers(srv: ServerThread) -> bool:
    try:
        return http_get(srv.url("/healthz"), timeout=5)[0] == 200
    except OSError:  # timed out: the event loop is blocked
        return False


def test_a_fifo_named_like_a_recording_never_freezes_the_server(srv: ServerThread) -> None:
    """Bug 13 (REC-FIFO): appending a final opened `fifo.jsonl` on the event loop, which
    blocks until someone reads the FIFO: the whole server froze."""
    with _fifo(_root(srv) / "fifo.jsonl", reader=True):
        done: list[BaseException | None] = []

        def publish() -> None:
            try:
                _publish_one(srv, "fifo")
                done.append(None)
            except BaseException as e:  # noqa: BLE001 - reported below
                done.append(e)

        t = threading.Thread(target=publish, daemon=True)
        t.start()
        t.join(10)
        assert _healthz_answers(srv)
    t.join(30)
    assert done == [None]


def test_a_fifo_named_like_a_seq_file_never_freezes_the_server(srv: ServerThread) -> None:
    """Bug 13: reading `.seq.json` back at the first request blocked on a FIFO the same way."""
    root = _root(srv)
    write_recording(root, "fifo2", [final("fifo2", 1), final("fifo2", 2)])
    (root / "fifo2.seq.json").unlink()
    with _fifo(root / "fifo2.seq.json", reader=False):
        result: list[int] = []
        t = threading.Thread(
            target=lambda: result.append(http_get(srv.url("/streams/fifo2.srt"), timeout=60)[0]),
            daemon=True,
        )
        t.start()
        t.join(5)
        assert _healthz_answers(srv)
        t.join(30)
    t.join(30)
    assert result == [200]
    viewer = Viewer(srv, "fifo2")
    try:
        assert viewer.wait(2, 10)
        assert strict_json(json.dumps(viewer.events[0]))["text"] == "final 1"
    finally:
        viewer.close()
