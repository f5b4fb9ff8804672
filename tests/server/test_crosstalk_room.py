"""A room's cross-talk check in the real server (loopback, real WebSocket clients), with stand-in
streams instead of the model: each publisher's pipeline is a script of captions with the level
its microphone heard them at, one caption per audio frame the publisher sends. What is under
test is the server's part: the room's captions pass the check (`rooms.RoomCrossTalk`) before its
log, so viewers, the SRT and the recording get each sentence once, under its speaker's name, a
caption waits at most `hold_s` and never past its room's end. The rule itself is
test_crosstalk.py's; the same with two real browser microphones and the model,
tests/web/test_room_crosstalk.py.
"""

from __future__ import annotations

import contextlib
import json
import math
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from serverkit import START, Collector, FakeWorker, QuietStream, http_get, ingest

from streamcap.core.captions import CaptionEvent
from streamcap.core.crosstalk import CrossTalkConfig
from streamcap.server.config import ServerConfig
from streamcap.server.thread import ServerThread

FRAME = np.zeros(1600, np.int16).tobytes()  # 0.1 s: one scripted caption each
JFK = "And so my fellow Americans, ask not."


def ev(kind: str, seg: int, text: str, start: float, end: float, db: float) -> CaptionEvent:
    return CaptionEvent(kind, seg, text, start, end, len(text), 400.0, level_db=db)  # type: ignore[arg-type]


#: The meeting as each microphone's pipeline captions it, in the order the captions come.
#: Every turn is heard by both microphones, the other one at -12 dB (-6 dB for the last);
#: the third turn is both talking at once, each into their own microphone.
SCRIPT: list[tuple[str, CaptionEvent]] = [
    ("Ana", ev("partial", 1, "And so my", 0.3, 1.2, -16.0)),
    ("Ben", ev("partial", 1, "And so my", 0.35, 1.25, -28.0)),
    ("Ben", ev("final", 1, JFK, 0.35, 2.4, -28.0)),  # the copy's final comes first
    ("Ana", ev("final", 1, JFK, 0.3, 2.5, -16.0)),
    ("Ana", ev("final", 2, "Go forward, 10 meters.", 3.0, 5.0, -28.0)),
    ("Ben", ev("final", 2, "Go forward 10 meters.", 3.05, 5.0, -16.0)),
    ("Ana", ev("final", 3, "Mary rolled the barrel.", 6.0, 8.0, -16.0)),
    ("Ben", ev("final", 3, "He was not an ill-disposed young man.", 6.1, 8.3, -17.0)),
    ("Ana", ev("final", 4, "Feels like these days go on forever.", 9.0, 12.0, -16.0)),
    ("Ben", ev("final", 4, "Feels like these days go on forever", 9.1, 12.0, -22.0)),
]
SAID = [
    ("Ana", JFK),
    ("Ben", "Go forward 10 meters."),
    ("Ana", "Mary rolled the barrel."),
    ("Ben", "He was not an ill-disposed young man."),
    ("Ana", "Feels like these days go on forever."),
]


class ScriptedStream(QuietStream):
    """A stand-in `LiveStream` whose every audio frame brings its next scripted caption."""

    def __init__(self, on_caption: Callable[[CaptionEvent], None], script: list[CaptionEvent]):
        self.on_caption = on_caption
        self.script = list(script)

    def feed(self, samples: Any) -> None:
        if self.script:
            self.on_caption(self.script.pop(0))


#: (room, publisher) whose stand-in says its microphone heard no speech at all, as a
#: `LiveStream`'s segmenter says where it heard none (`StreamProtocol.quiet`).
SILENT = {("quiet", "Ben")}


class Silent:
    quiet = (-math.inf, math.inf)


def factory(script: list[tuple[str, CaptionEvent]]) -> Any:
    def make(stream: str, start: Any, on_caption: Callable[[CaptionEvent], None]) -> Any:
        out = ScriptedStream(on_caption, [e for who, e in script if who == start.speaker])
        if (stream, start.speaker) in SILENT:
            out.protocol = Silent()  # type: ignore[attr-defined]
        return out

    return make


@pytest.fixture
def server() -> Iterator[ServerThread]:
    config = ServerConfig(port=0, publish_token=None, view_token=None, admission=False)
    with ServerThread(config, FakeWorker(), stream_factory=factory(SCRIPT)) as srv:
        yield srv


@contextlib.contextmanager
def join(srv: ServerThread, room: str, names: list[str]) -> Iterator[dict[str, Any]]:
    """The publishers `names` in `room`, each started (its connection closed at the end)."""
    with contextlib.ExitStack() as stack:
        out = {}
        for name in names:
            ws = stack.enter_context(ingest(srv, room, token=None, speaker=name))
            ws.send(json.dumps({**START, "speaker": name}))  # (the stand-in's script: by name)
            assert json.loads(ws.recv(timeout=10))["type"] == "ready"
            out[name] = ws
        yield out


def leave(ws: Any) -> tuple[int, float]:
    """Stop publishing; the close code and when it came (after every final is out)."""
    ws.send(json.dumps({"type": "stop"}))
    try:
        while True:
            ws.recv(timeout=30)
    except Exception:  # noqa: BLE001 - the close ends the loop
        pass
    assert ws.close_code is not None
    return ws.close_code, time.monotonic()


def test_a_room_captions_each_sentence_once_under_its_speakers_name(
    server: ServerThread,
) -> None:
    viewer = Collector(server, "standup", token=None)
    with join(server, "standup", ["Ana", "Ben"]) as pubs:
        for who, _ in SCRIPT:
            pubs[who].send(FRAME)
            time.sleep(0.05)
        assert leave(pubs["Ben"])[0] == 1000
        assert leave(pubs["Ana"])[0] == 1000

    def named(v: Collector) -> list[tuple[str, str]]:
        return [(e.get("speaker", ""), e["text"]) for e in v.finals() if e["text"].strip()]

    assert viewer.wait_for(lambda v: len(named(v)) >= len(SAID), 10), viewer.events
    time.sleep(0.3)
    viewer.stop()
    assert sorted(named(viewer)) == sorted(SAID), viewer.events
    # the copy's partial never showed: nothing of Ana's sentence under Ben's name
    assert not [e for e in viewer.events if e.get("speaker") == "Ben" and "so my" in e["text"]]
    status, _, srt = http_get(server.url("/streams/standup.srt"))
    assert status == 200
    cues = [b for b in srt.strip().split("\n\n") if b.strip()]
    assert len(cues) == len(SAID), srt
    # what waited carries its wait in its latency (the overlay's hold counts from the speech)
    assert all(400.0 <= e["latency_ms"] <= 400.0 + 1000.0 + 300.0 for e in viewer.finals())
    entry = server.server.hub.get("standup") if server.server else None
    assert entry is not None and not entry.publishing


def test_what_waits_is_decided_when_the_room_ends(server: ServerThread) -> None:
    """A caption that could be a copy waits for the other microphones (here: up to 30 s); the
    room's last publisher leaving decides it before that publisher's "stopped" (every final
    out), and it is in the log, the SRT and the viewers' captions."""
    assert server.server is not None
    server.server.delivery.crosstalk = CrossTalkConfig(hold_s=30.0)
    viewer = Collector(server, "late", token=None)
    with join(server, "late", ["Ana", "Ben"]) as pubs:
        pubs["Ana"].send(FRAME)  # her first words: her own level is not known yet: they wait
        pubs["Ana"].send(FRAME)  # (their final replaces the waiting partial)
        time.sleep(0.5)
        entry = server.server.hub.get("late")
        assert entry is not None and not entry.log.since(0)
        assert leave(pubs["Ben"])[0] == 1000
        assert leave(pubs["Ana"])[0] == 1000
    assert [(c.speaker, c.text) for c in entry.log.since(0)] == [("Ana", JFK)]
    assert viewer.wait_for(lambda v: [e["text"] for e in v.finals()] == [JFK], 10), viewer.events
    viewer.stop()


def test_a_first_turn_shows_at_once_while_the_other_microphone_hears_no_speech(
    server: ServerThread,
) -> None:
    """As above, but Ben's pipeline says his microphone heard no speech: Ana's first words
    cannot be a copy of his, so they show at once, her partial too (issue 37, item 2: held, a
    first turn's partials were each replaced before they went out, and none showed)."""
    assert server.server is not None
    server.server.delivery.crosstalk = CrossTalkConfig(hold_s=30.0)
    viewer = Collector(server, "quiet", token=None)

    def shown(v: Collector) -> list[tuple[str, str, str, float]]:
        return [(e["type"], e.get("speaker", ""), e["text"], e["latency_ms"]) for e in v.events]

    with join(server, "quiet", ["Ana", "Ben"]) as pubs:
        pubs["Ana"].send(FRAME)
        assert viewer.wait_for(lambda v: len(shown(v)) >= 1, 5), viewer.events
        pubs["Ana"].send(FRAME)
        assert viewer.wait_for(lambda v: len(shown(v)) >= 2, 5), viewer.events
        assert shown(viewer) == [  # not held: the latency their pipeline gave them
            ("partial", "Ana", "And so my", 400.0), ("final", "Ana", JFK, 400.0)
        ]  # fmt: skip
        assert leave(pubs["Ben"])[0] == 1000
        assert leave(pubs["Ana"])[0] == 1000
    viewer.stop()


def test_a_failing_check_costs_no_caption(
    server: ServerThread, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check raising (a bug) leaves every caption as it came, what it held included: the
    room then shows copies too, but loses nothing."""
    from streamcap.server.rooms import RoomCrossTalk

    real = RoomCrossTalk.offer
    calls = []

    def broken(self: RoomCrossTalk, cap: CaptionEvent, pub: Any, now: float) -> Any:
        calls.append(cap.text)
        if len(calls) > 3:
            raise RuntimeError("a bug in the check")
        return real(self, cap, pub, now)

    monkeypatch.setattr(RoomCrossTalk, "offer", broken)
    viewer = Collector(server, "broken", token=None)
    with join(server, "broken", ["Ana", "Ben"]) as pubs:
        for who, _ in SCRIPT:
            pubs[who].send(FRAME)
            time.sleep(0.05)
        assert leave(pubs["Ben"])[0] == 1000
        assert leave(pubs["Ana"])[0] == 1000
    finals = [e for _, e in SCRIPT if e.type == "final"]
    # the first copy was left out before the check broke; every other final is there
    assert viewer.wait_for(lambda v: len(v.finals()) >= len(finals) - 1, 10), viewer.events
    viewer.stop()
    got = sorted((e.get("speaker", ""), e["text"]) for e in viewer.finals())
    assert got == sorted((w, e.text) for w, e in SCRIPT if e.type == "final" and e.segment > 1
                         or (w, e.text) == ("Ana", JFK))  # fmt: skip
