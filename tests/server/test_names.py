"""Issue 37, item 4: a token holder renames a stream's speakers ("Speaker 2" -> "Mary") with one
HTTP call, `POST /streams/ID/names`, and the name reaches past and future captions: live
viewers (a `names` message for those that asked, renamed captions for all), replays, the
subtitle and text downloads. A real server on loopback, real HTTP and WebSocket clients; the
streams are stand-ins whose finals carry voice labels (`namekit.LabelledStream`): what is
under test is the server's side, not the labeller.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from typing import Any

import pytest
from namekit import call, labelled_factory, publish_finals
from serverkit import PUB, VIEW, Collector, FakeWorker, http_get

from streamcap.server.config import ServerConfig
from streamcap.server.http_body import MAX_BODY_BYTES
from streamcap.server.thread import ServerThread


@pytest.fixture
def srv() -> Iterator[ServerThread]:
    config = ServerConfig(port=0, admission=False, publish_token=PUB, view_token=VIEW)
    with ServerThread(config, FakeWorker(), stream_factory=labelled_factory) as s:
        yield s


def speakers(c: Collector) -> list[tuple[str, str | None]]:
    return [(e["speaker"], e.get("label")) for e in c.finals()]


def names_events(c: Collector) -> list[dict[str, Any]]:
    return [e for e in c.events if e["type"] == "names"]


def test_a_rename_reaches_viewers_replays_and_downloads(srv: ServerThread) -> None:
    watcher = Collector(srv, "meet", names=1)  # the pages ask for names messages
    plain = Collector(srv, "meet")  # a client written before them
    publish_finals(srv, "meet", 3)
    assert watcher.wait_for(lambda c: len(c.finals()) == 3, 10), watcher.events
    assert names_events(watcher) == []  # no map yet: nothing to tell
    assert speakers(watcher) == [("Speaker 1", None), ("Speaker 2", None), ("Speaker 1", None)]

    status, answer = call(srv, "meet", {"Speaker 2": "Mary"})
    assert (status, answer) == (200, {"stream": "meet", "names": {"Speaker 2": "Mary"}})
    # told at once, as the whole map, with no seq (not a caption; never replayed)
    assert watcher.wait_for(lambda c: len(names_events(c)) == 1, 10), watcher.events
    assert names_events(watcher)[0] == {
        "type": "names", "stream": "meet", "names": {"Speaker 2": "Mary"},
    }  # fmt: skip
    assert "names" not in [e["type"] for e in plain.events]  # did not ask: captions only

    # what comes next is renamed for every viewer, with the label it was given
    publish_finals(srv, "meet", 2)  # a second session: its finals are Speaker 1, Speaker 2
    for c in (watcher, plain):
        assert c.wait_for(lambda c: len(c.finals()) == 5, 10), c.events
        assert speakers(c)[3:] == [("Speaker 1", None), ("Mary", "Speaker 2")]

    # a viewer that comes later gets the past renamed, then the map
    late = Collector(srv, "meet", names=1)
    assert late.wait_for(lambda c: len(names_events(c)) == 1, 10), late.events
    assert [e["type"] for e in late.events] == ["final"] * 5 + ["names"]
    assert [s for s, _ in speakers(late)] == ["Speaker 1", "Mary", "Speaker 1", "Speaker 1", "Mary"]

    # downloads: the renamed speaker, never the old label
    status, _, srt = http_get(srv.url(f"/streams/meet.srt?token={VIEW}"))
    assert status == 200 and "Mary: final 1" in srt and "Speaker 2" not in srt, srt
    status, _, vtt = http_get(srv.url(f"/streams/meet.vtt?token={VIEW}"))
    assert status == 200 and "<v Mary>" in vtt and "Speaker 2" not in vtt, vtt
    assert call(srv, "meet", token=VIEW) == (
        200,
        {"stream": "meet", "names": {"Speaker 2": "Mary"}},
    )

    # renaming the name shown renames the voice behind it (and a voice labelled "Mary", were
    # there one: whatever shows as "Mary" now shows as "Mary Ann"); "" takes it all back
    renamed = call(srv, "meet", {"Mary": "Mary Ann"})[1]["names"]
    assert renamed == {"Speaker 2": "Mary Ann", "Mary": "Mary Ann"}
    assert call(srv, "meet", {"Mary Ann": ""})[1]["names"] == {}
    assert watcher.wait_for(lambda c: len(names_events(c)) == 3, 10), watcher.events
    assert names_events(watcher)[-1]["names"] == {}
    status, _, srt = http_get(srv.url(f"/streams/meet.srt?token={VIEW}"))
    assert "Speaker 2: final 1" in srt and "Mary" not in srt, srt  # a new map: made again
    for c in (watcher, plain, late):
        c.stop()


def test_two_labels_may_take_one_name(srv: ServerThread) -> None:
    """The labeller split one person in two: both labels get the person's name."""
    publish_finals(srv, "split", 2)
    status, answer = call(srv, "split", {"Speaker 1": "Ana", "Speaker 2": "Ana"})
    assert status == 200 and answer["names"] == {"Speaker 1": "Ana", "Speaker 2": "Ana"}
    c = Collector(srv, "split")
    assert c.wait_for(lambda c: len(c.finals()) == 2, 10)
    assert speakers(c) == [("Ana", "Speaker 1"), ("Ana", "Speaker 2")]
    c.stop()


@pytest.mark.parametrize(
    ("body", "status", "reason"),
    [
        ({"Speaker 2": "Mary\u202e"}, 400, "invisible"),  # a bidi override
        ({"Speaker 2": "Ana\u3164"}, 400, "invisible"),  # a Hangul filler: a second "Ana"
        ({"Speaker 2": "M" * 33}, 400, "1-32 characters"),
        ({"Speaker 2": "<b>Mary</b>"}, 400, "no < > &"),
        ({"Speaker 2": 7}, 400, "strings"),
        ({"": "Mary"}, 400, "label"),
        ({}, 400, "no rename"),
        (["Speaker 2", "Mary"], 400, "JSON object"),
        ({"Ｍary": "Mary"}, 400, "normal form"),  # full-width: not the label as captions hold it
        ({"Speaker 2": "Mary", "Mary": "Maria"}, 200, ""),  # two keys, two labels: fine
    ],
)
def test_bad_names_are_refused_with_a_reason(
    srv: ServerThread, body: object, status: int, reason: str
) -> None:
    publish_finals(srv, "bad", 1)
    got, text = call(srv, "bad", body)
    assert got == status, text
    assert reason in (text if isinstance(text, str) else ""), text
    if status == 400:
        assert text.count("\n") == 1  # one line
        assert call(srv, "bad", token=VIEW)[1]["names"] == {}  # nothing changed


def test_who_may_rename(srv: ServerThread) -> None:
    publish_finals(srv, "auth", 1)
    assert call(srv, "auth", {"Speaker 1": "Ana"}, token=None)[0] == 403
    status, text = call(srv, "auth", {"Speaker 1": "Ana"}, token=VIEW)  # a viewer may not
    assert status == 403 and "wrong publish token" in text
    evil = {"Origin": "https://evil.example"}  # a page elsewhere, through a visitor's browser
    assert call(srv, "auth", {"Speaker 1": "Ana"}, headers=evil) == (403, "origin not allowed\n")
    own = {"Origin": srv.url("").rstrip("/")}
    assert call(srv, "auth", {"Speaker 1": "Ana"}, headers=own)[0] == 200
    with_query = srv.url(f"/streams/auth/names?token={PUB}")  # browsers: ?token=
    assert call(with_query.split("/streams/")[0], "auth", token=None)[0] == 401
    # reading the map is a viewer's: the view token
    assert call(srv, "auth", token=None)[0] == 401
    assert call(srv, "auth", token=VIEW) == (200, {"stream": "auth", "names": {"Speaker 1": "Ana"}})
    assert call(srv, "nobody", {"Speaker 1": "Ana"})[0] == 404
    assert call(srv, "nobody", token=VIEW)[0] == 404
    assert call(srv, "auth", {"Speaker 1": "Ana"}, method="PUT")[0] == 405


def test_a_body_too_big_is_413_and_the_server_goes_on(srv: ServerThread) -> None:
    publish_finals(srv, "big", 1)
    huge = json.dumps({"Speaker 1": "x" * (MAX_BODY_BYTES + 10)}).encode()
    status, text = call(srv, "big", raw=huge)
    assert status == 413 and str(MAX_BODY_BYTES) in text, text
    # a body declared far bigger than is read at all, sent by hand: still an answer
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as s:
        s.sendall(
            b"POST /streams/big/names HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Authorization: Bearer " + PUB.encode() + b"\r\nContent-Length: 999999999\r\n\r\n{"
        )
        assert s.recv(100).startswith(b"HTTP/1.1 413")
    assert call(srv, "big", {"Speaker 1": "Ana"})[0] == 200


def test_a_server_without_publish_token_renames_for_this_machine_only() -> None:
    """Secure by default: no publish token means loopback clients only, also on a server that
    listens on every address (reached here over this machine's own network address)."""
    here = ""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:  # sends nothing
        try:
            probe.connect(("10.255.255.255", 1))
            here = probe.getsockname()[0]
        except OSError:
            pass
    config = ServerConfig(host="0.0.0.0", port=0, admission=False)
    with ServerThread(config, FakeWorker(), stream_factory=labelled_factory) as s:
        publish_finals(s, "open", 1, token=None)
        assert call(s, "open", {"Speaker 1": "Ana"}, token=None)[0] == 200  # 127.0.0.1
        if here.startswith("127.") or not here:
            pytest.skip("no network address other than loopback to come from")
        status, text = call(f"http://{here}:{s.port}", "open", {"Speaker 1": "Bo"}, token=None)
        assert status == 403 and "this machine only" in text, text
