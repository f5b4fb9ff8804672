"""Issue 37, item 4: a rename survives a restart with `--record DIR`. Each rename appends the
whole names map to the stream's recording as a `names` line; reading the recording back
restores it, checked like any line read back (a hand-edited map with a bidi override or a
look-alike name is skipped, the last good one stands). Replays that send recorded lines as
they are (`record_index.RecordedLine`) never send a renamed speaker's old label. A real server
on loopback, twice on one folder; stand-in streams whose finals carry voice labels.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from namekit import call, labelled_factory, publish_finals
from serverkit import PUB, VIEW, Collector, FakeWorker, http_get

from streamcap.server.config import ServerConfig
from streamcap.server.record import Recorder
from streamcap.server.record_lines import BadLine, parse_line, parse_names
from streamcap.server.thread import ServerThread


def server(folder: Path) -> ServerThread:
    # two finals in memory: a replay from the start reads the others back from the recording
    config = ServerConfig(
        port=0, admission=False, publish_token=PUB, view_token=VIEW, record_dir=folder,
        recorded_memory_finals=2,
    )  # fmt: skip
    return ServerThread(config, FakeWorker(), stream_factory=labelled_factory)


def shown(c: Collector) -> list[str]:
    return [e["speaker"] for e in c.finals()]


def lines(folder: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (folder / "room.jsonl").read_text().splitlines()]


def test_a_rename_is_recorded_and_survives_a_restart(tmp_path: Path) -> None:
    with server(tmp_path) as srv:
        publish_finals(srv, "room", 6)
        assert call(srv, "room", {"Speaker 2": "Mary"})[0] == 200
        # the replay's first finals are recorded lines sent as they are: renamed all the same
        c = Collector(srv, "room", names=1)
        assert c.wait_for(lambda c: any(e["type"] == "names" for e in c.events), 10), c.events
        assert shown(c) == ["Speaker 1", "Mary"] * 3
        assert all(e.get("label") == "Speaker 2" for e in c.finals() if e["speaker"] == "Mary")
        c.stop()
    recorded = lines(tmp_path)
    assert [x["type"] for x in recorded] == ["final"] * 6 + ["names"]
    assert recorded[-1]["names"] == {"Speaker 2": "Mary"} and recorded[-1]["at"] > 1.7e9
    # the captions keep their labels: a rename rewrites nothing
    assert {x["speaker"] for x in recorded[:6]} == {"Speaker 1", "Speaker 2"}

    with server(tmp_path) as srv:  # a restart: the map is read back with the stream
        assert call(srv, "room", token=VIEW) == (
            200,
            {"stream": "room", "names": {"Speaker 2": "Mary"}},
        )
        c = Collector(srv, "room", names=1)
        assert c.wait_for(lambda c: any(e["type"] == "names" for e in c.events), 10), c.events
        assert shown(c) == ["Speaker 1", "Mary"] * 3
        assert c.events[-1] == {"type": "names", "stream": "room", "names": {"Speaker 2": "Mary"}}
        status, _, srt = http_get(srv.url(f"/streams/room.srt?token={VIEW}"))
        assert status == 200 and srt.count("Mary: ") == 3 and "Speaker 2" not in srt, srt
        # the stream goes on: its new finals are renamed, and a new rename is recorded
        publish_finals(srv, "room", 2)
        assert c.wait_for(lambda c: len(c.finals()) == 8, 10), c.events
        assert shown(c)[6:] == ["Speaker 1", "Mary"]
        assert call(srv, "room", {"Speaker 1": "Ben"})[1]["names"] == {
            "Speaker 2": "Mary", "Speaker 1": "Ben",
        }  # fmt: skip
        c.stop()
    assert lines(tmp_path)[-1]["names"] == {"Speaker 2": "Mary", "Speaker 1": "Ben"}


def test_a_broken_names_line_is_skipped(tmp_path: Path) -> None:
    with server(tmp_path) as srv:
        publish_finals(srv, "room", 2)
        assert call(srv, "room", {"Speaker 2": "Mary"})[0] == 200
    with (tmp_path / "room.jsonl").open("a", encoding="utf-8") as f:  # hand-edited
        for names in (
            {"Speaker 1": "A\u202eB"},
            {"Speaker 1": "Ana\u3164"},
            ["x"],
            {"Speaker 1": "x" * 40},
        ):
            f.write(json.dumps({"type": "names", "names": names, "at": 1}) + "\n")
        f.write('{"type": "names", "names": {"Speaker 1": "Ben"}, "at": NaN}\n')
    rec = Recorder(tmp_path).load("room", max_finals=100)
    assert rec is not None and rec.names == {"Speaker 2": "Mary"}  # the last good one
    assert len(rec.log.finals()) == 2
    with server(tmp_path) as srv:
        assert call(srv, "room", token=VIEW)[1]["names"] == {"Speaker 2": "Mary"}


def test_names_lines_are_checked_as_a_rename() -> None:
    ok = b'{"type":"names","names":{"Speaker 2":"Mary"},"at":1765000000.5}'
    assert parse_names(ok) == {"Speaker 2": "Mary"}
    assert parse_line(ok) is None  # not a final, and not a broken line
    assert parse_names(b'{"type":"final"}') is None
    for bad in (
        b'{"type":"names","names":{"Speaker 2":"Speaker 2"},"at":1}',  # renamed to itself
        b'{"type":"names","names":{"Speaker 2":"Mary"},"at":-1}',
        b'{"type":"names","names":{"Speaker 2":"Mary"}}',
        b'{"type":"names","names":{"Speaker 2":""},"at":1}',
        b'{"type":"names","names":{"Speaker 2":7},"at":1}',
    ):
        try:
            parse_names(bad)
        except BadLine:
            continue
        raise AssertionError(f"read back: {bad!r}")
