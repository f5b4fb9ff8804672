"""Issue 37, item 3: `/streams/ID.txt` (the plain transcript) and `/streams/ID.md` (minutes)
from a real server on loopback, with a stand-in stream (no model: what is under test is the
server's downloads, not the captions), live and from a recording read back. They take the
subtitle files' path: the view token, the byte budget checked before any work, a file made
once per state of the finals and extended by new finals, made off the event loop.
"""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path

import pytest
from recordkit import LOUD, QUIET, final, record_server, write_recording
from serverkit import START, VIEW, Collector, FakeWorker, fake_factory, http_get, ingest

from streamcap.core.captions import Caption
from streamcap.formats.minutes import Minutes, render_minutes
from streamcap.formats.text import render_txt
from streamcap.server.config import ServerConfig
from streamcap.server.subtitle_doc import SubtitleDoc
from streamcap.server.thread import ServerThread


def today() -> str:
    return time.strftime("%Y-%m-%d")


def headers(url: str) -> dict[str, str]:
    with urllib.request.urlopen(url, timeout=10) as r:
        return {k.lower(): v for k, v in r.headers.items()}


def counted_adds(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many finals the server's minutes take in (`Minutes.add`), in any thread."""
    count = [0]
    real = Minutes.add

    def add(self: Minutes, caption: Caption) -> str:
        count[0] += 1
        return real(self, caption)

    monkeypatch.setattr(Minutes, "add", add)
    return count


def test_a_live_rooms_text_and_minutes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A named publisher's finals as text and minutes while the stream runs: the right types,
    the same bytes as the writers make of the finals the viewers got, a partial changes
    nothing (no new work), and a new final extends the minutes (it is not made again)."""
    adds = counted_adds(monkeypatch)
    with record_server(tmp_path) as srv, ingest(srv, "standup", token=None, speaker="Ana") as pub:
        viewer = Collector(srv, "standup", token=None)
        pub.send(json.dumps(START))
        assert json.loads(pub.recv(timeout=10))["type"] == "ready"
        for _ in range(3):
            pub.send(LOUD)
        assert viewer.wait_for(lambda v: len(v.finals()) == 3, 10)
        txt_url, md_url = srv.url("/streams/standup.txt"), srv.url("/streams/standup.md")
        status, ctype, txt = http_get(txt_url)
        assert status == 200 and ctype == "text/plain; charset=utf-8"
        assert txt == "Ana: final 0.\nfinal 1.\nfinal 2.\n"
        status, ctype, md = http_get(md_url)
        assert status == 200 and ctype == "text/markdown; charset=utf-8"
        assert 'filename="standup.md"' in headers(md_url)["content-disposition"]
        assert adds[0] == 3  # the server's minutes took in each final once
        finals = [Caption.from_dict(e) for e in viewer.finals()]
        assert md == render_minutes(finals, title="standup", date=today())
        assert "- Ana\n" in md and "**Ana** (00:00:00): final 0. final 1. final 2.\n" in md

        pub.send(QUIET)  # a partial: the files are the same, and nothing is made again
        assert viewer.wait_for(lambda v: v.events[-1]["type"] == "partial", 10)
        before = adds[0]
        assert http_get(md_url)[2] == md and http_get(txt_url)[2] == txt
        assert adds[0] == before

        pub.send(LOUD)
        assert viewer.wait_for(lambda v: len(v.finals()) == 4, 10)
        status, _, md = http_get(md_url)
        assert adds[0] == before + 1  # the new final only: the minutes were extended
        finals = [Caption.from_dict(e) for e in viewer.finals()]
        assert status == 200 and md == render_minutes(finals, title="standup", date=today())
        assert http_get(txt_url)[2] == render_txt(finals)
        viewer.stop()


def test_a_recorded_meeting_reads_back_as_minutes(tmp_path: Path) -> None:
    """After a restart (a recording read back): the minutes hold every recorded final in the
    order they were said, a room's overlapping turns included (Ben's remark during Ana's long
    turn comes between its start and Ana's next turn)."""
    lines = [
        final("meet", 1, text="Sounds good.", speaker="Ben"),  # said during Ana's turn
        Caption("final", "meet", 2, 2, "So the plan is to move the build.", 0.5, 9.0, 33, 1.0,
                "ep1", speaker="Ana"),
        final("meet", 12, text="Any questions?", speaker="Ana"),
        final("meet", 14, text="None.", speaker="Speaker 3"),
    ]  # fmt: skip
    write_recording(tmp_path, "meet", lines)
    with record_server(tmp_path) as srv:
        status, _, md = http_get(srv.url("/streams/meet.md"))
        assert status == 200
        assert md == render_minutes(lines, title="meet", date=today())
        body = md.split("## Transcript\n", 1)[1]
        assert body == (
            "\n**Ana** (00:00:00): So the plan is to move the build.\n"
            "\n**Ben** (00:00:01): Sounds good.\n"
            "\n**Ana** (00:00:12): Any questions?\n"
            "\n**Speaker 3** (00:00:14): None.\n"
        )
        assert "## Participants\n\n- Ana\n- Ben\n- Speaker 3\n" in md
        status, _, txt = http_get(srv.url("/streams/meet.txt"))
        assert status == 200 and txt == render_txt(lines)
        assert txt.splitlines()[:2] == [
            "Ana: So the plan is to move the build.",
            "Ben: Sounds good.",
        ]


def test_the_view_token_and_unknown_streams() -> None:
    config = ServerConfig(port=0, admission=False, view_token=VIEW)
    with ServerThread(config, FakeWorker(), stream_factory=fake_factory) as srv:
        for kind in ("txt", "md"):
            status, _, body = http_get(srv.url(f"/streams/solo.{kind}"))
            assert (status, body) == (401, "missing or wrong view token\n")
            status, _, body = http_get(srv.url(f"/streams/nobody.{kind}?token={VIEW}"))
            assert (status, body) == (404, "unknown stream 'nobody'\n")
        assert http_get(srv.url(f"/streams/solo.pdf?token={VIEW}"))[0] == 404


def test_a_download_over_its_budget_is_refused_before_any_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The minutes spend the address's download budget like the subtitle files: a refused
    download (429, Retry-After) takes in no final."""
    # minutes of 1.3 kB: one fits the 2 kB burst, two do not
    write_recording(tmp_path, "tight", [final("tight", k, words=8) for k in range(1, 40)])
    adds = counted_adds(monkeypatch)
    with record_server(tmp_path, download_burst=2000.0, download_rate=1.0) as srv:
        url = srv.url("/streams/tight.md")
        assert http_get(url)[0] == 200
        made = adds[0]
        assert made == 39  # the whole recording, once
        req = urllib.request.Request(url)
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(req, timeout=10)
        refused.value.close()  # the connection goes now, not when the error is collected
        assert refused.value.code == 429 and int(refused.value.headers["Retry-After"]) >= 1
        assert adds[0] == made


@pytest.mark.parametrize("kind", ["txt", "md"])
def test_the_kept_file_grows_by_its_new_finals_as_a_whole_one_would_read(kind: str) -> None:
    """`SubtitleDoc` (pure): text and minutes extended final by final are byte for byte what
    one render of all of them makes; a final said before the last one ends (a room) makes the
    whole file again, in the order things were said."""
    caps = [
        final("s", 1, text="One.", speaker="Ana"),
        final("s", 2, text="Two.", speaker="Ana"),
        final("s", 3, text="Three.", speaker="Ben"),
        final("s", 4, text="Four.", speaker="Speaker 3"),
    ]
    whole = {"txt": lambda c: render_txt(c), "md": lambda c: render_minutes(c, title="s", date="d")}
    doc = SubtitleDoc(kind, "ep1", title="s", date="d")
    for k, c in enumerate(caps, 1):
        assert doc.extend([c]) and doc.appendable
        assert doc.body.decode() == whole[kind](caps[:k]) and doc.through == c.seq
    early = Caption("final", "s", 5, 5, "Meanwhile.", 2.5, 2.8, 10, 1.0, "ep1", speaker="Ben")
    assert not doc.extend([early])  # said during "Two.": cannot be appended
    again = SubtitleDoc.render(kind, "ep1", [*caps, early], title="s", date="d")
    assert not again.appendable and again.body.decode() == whole[kind]([*caps, early])
    assert again.body.decode().index("Meanwhile.") < again.body.decode().index("Three.")
