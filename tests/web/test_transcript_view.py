"""Issue 37, item 3: the transcript page (`/transcript?stream=ID`), in real headless chromium
against a real caption server on loopback. The decoding is replaced by recorded runs of the
model's captions (`overlay_events`: lf3 with voice labels, a room of two named publishers) or
by events the test sends one at a time (`overlaykit`); the server numbers, names, stores and
sends them as it does the model's, over the same /captions WebSocket the overlay uses.

What a reader meets is checked on every change the page draws (a MutationObserver probe):
one block per turn with its name and time (the same turns as the server's minutes), the words
being spoken in place (never under a name that is not theirs; unnamed ones in a block of their
own), the page following the live end, staying where the reader scrolled up, and coming back
with "Jump to live"; a rename (`names` event); reconnecting and resuming (seq + epoch) across
a server restart, and starting over on a new log; the print stylesheet. Screenshots (live,
scrolled up, renamed, print, reconnecting) go to `out/transcript/` (and
`STREAMCAP_SHOTS_DIR=DIR`).
"""

from __future__ import annotations

import json
import os
import queue
import re
import shutil
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from overlay_events import load
from overlaykit import SCRIPTS, LivePublisher, chromium, play, scripted_factory, scripted_server
from serverkit import FakeWorker, http_get

from streamcap.cli.serve_setup import startup_lines
from streamcap.core.captions import Caption
from streamcap.core.speaker_names import renamed
from streamcap.formats.minutes import Minutes, clock_time
from streamcap.server.config import ServerConfig
from streamcap.server.thread import ServerThread

pytestmark = [pytest.mark.browser]

SPEED = float(os.environ.get("STREAMCAP_OVERLAY_SPEED", "8"))
OUT = Path(__file__).resolve().parents[2] / "out" / "transcript"
SHOTS = os.environ.get("STREAMCAP_SHOTS_DIR")

#: Every turn on the page: the name shown, the time, the final text, the partials in it.
TURNS = """() => [...document.querySelectorAll('#transcript .turn')].map((el) => ({
  who: el.dataset.who, name: el.querySelector('.name').textContent,
  time: el.querySelector('time').textContent, live: el.classList.contains('live'),
  text: [...el.querySelectorAll('.final')].map((s) => s.textContent).join('').trim(),
  partials: [...el.querySelectorAll('.partial')].map((s) => [s.dataset.who, s.textContent]),
}))"""

#: Installed in the page: after every change of the transcript (a MutationObserver runs once
#: the page's script has drawn it, scroll included), whether a partial's words sit under a
#: name that is not theirs (`wrong`), where partials are (at the end of a turn, or a block of
#: their own, unnamed or named), and whether the page shows its end while it follows.
PROBE = """() => {
  const main = document.getElementById("transcript");
  const look = () => {
    let wrong = 0, inline = 0, own = 0, unnamed = 0;
    for (const span of main.querySelectorAll(".partial")) {
      const turn = span.closest(".turn");
      if (turn.dataset.who !== span.dataset.who) wrong++;
      if (!turn.classList.contains("live")) inline++;
      else if (span.dataset.who) own++;
      else unnamed++;
    }
    const doc = document.documentElement;
    return { wrong, inline, own, unnamed, follow: document.body.dataset.follow === "true",
             atEnd: innerHeight + scrollY >= doc.scrollHeight - 48, scrollY };
  };
  window.looks = [];
  new MutationObserver(() => window.looks.push(look()))
    .observe(main, { childList: true, subtree: true, characterData: true });
}"""


#: The contrast ratio (WCAG 2) of each kind of text on the page against the page's background.
CONTRASTS = """() => {
  const lum = (css) => {
    const [r, g, b] = css.match(/[\\d.]+/g).slice(0, 3).map((v) => {
      const c = Number(v) / 255;
      return c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4;
    });
    return 0.2126 * r + 0.7152 * g + 0.0722 * b;
  };
  const bg = lum(getComputedStyle(document.documentElement).backgroundColor);
  const out = {};
  const kinds = ["h1", "#status", "#tools", "#tools a", ".name", "time", ".final", ".partial"];
  for (const sel of kinds) {
    const el = document.querySelector(sel);
    if (!el) continue;
    const fg = lum(getComputedStyle(el).color);
    out[sel] = (Math.max(fg, bg) + 0.05) / (Math.min(fg, bg) + 0.05);
  }
  return out;
}"""


def expected_turns(
    finals: list[Caption], names: dict[str, str] | None = None
) -> list[tuple[str, str, str]]:
    """The turns of `finals` in the order they arrived (seq), by the minutes' own rule."""
    minutes = Minutes()
    for c in sorted(finals, key=lambda c: c.seq):
        minutes.add(renamed(c, names or {}))
    return [(t.speaker, clock_time(t.start), " ".join(t.texts)) for t in minutes.turns]


def page_turns(page: Any) -> list[tuple[str, str, str]]:
    return [(t["who"], t["time"], " ".join(t["text"].split())) for t in page.evaluate(TURNS)]


def md_turns(md: str) -> list[tuple[str, str, str]]:
    """The turns of served minutes (`**Name** (HH:MM:SS): text`), unescaped."""
    out = []
    for m in re.finditer(r"^\*\*(.+?)\*\* \((\d\d:\d\d:\d\d)\): (.*)$", md, re.M):
        out.append(tuple(re.sub(r"\\(.)", r"\1", g) for g in m.groups()))
    return out  # type: ignore[return-value]


def keep(*shots: Path) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for shot in shots:
        shutil.copyfile(shot, OUT / shot.name)
        if SHOTS:
            Path(SHOTS).mkdir(parents=True, exist_ok=True)
            shutil.copyfile(shot, Path(SHOTS) / shot.name)


def watch_errors(page: Any) -> list[str]:
    """Script errors, console errors (a CSP refusal is one) and failed loads (but the
    browser's own favicon request: no page has one)."""
    errors: list[str] = []

    def console(m: Any) -> None:
        if m.type == "error" and not m.location.get("url", "").endswith("/favicon.ico"):
            errors.append(f"{m.text} ({m.location.get('url')})")

    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", console)
    return errors


def last_seq(page: Any) -> int:
    return int(page.evaluate("Number(document.getElementById('transcript').dataset.lastSeq)"))


def test_a_meeting_read_live_scrolled_renamed_and_printed(tmp_path: Path) -> None:
    """lf3 with voice labels (5:27, nine labels; partials unnamed until their final): the
    whole run through the page, then a rename and the print view."""
    events = load("lf3_speakers")
    SCRIPTS["lf3_speakers"] = events
    seconds = max(e["at"] for e in events) / SPEED + 1.0
    shots = []
    with scripted_server(SPEED) as srv, chromium() as browser:
        page = browser.new_page(viewport={"width": 900, "height": 700})
        errors = watch_errors(page)
        page.goto(srv.url("/transcript?stream=lf3"))
        page.wait_for_function("() => document.body.dataset.publishing === 'false'")
        assert "waiting for stream 'lf3'" in page.inner_text("#status")
        page.evaluate(PROBE)
        sender = play(srv, "lf3", "lf3_speakers", seconds)

        # live: more than a window of text, the page at its end, words being said in a block
        page.wait_for_function(
            "() => document.documentElement.scrollHeight > innerHeight + 300"
            " && document.querySelector('.turn.live .partial')",
            timeout=60_000,
        )
        assert page.inner_text("#status") == "live: 'lf3'"
        shots.append(tmp_path / "transcript-live.png")
        page.screenshot(path=str(shots[-1]))

        # the reader scrolls up: the page stays where they read while captions come
        page.mouse.move(450, 400)
        page.mouse.wheel(0, -500)
        page.wait_for_function("() => document.body.dataset.follow === 'false'")
        page.wait_for_timeout(300)
        assert page.is_visible("#jump") and page.inner_text("#jump") == "↓ Jump to live"
        y, seq = page.evaluate("scrollY"), last_seq(page)
        page.wait_for_function(
            f"() => Number(document.getElementById('transcript').dataset.lastSeq) > {seq + 8}",
            timeout=60_000,
        )
        assert page.evaluate("scrollY") == y
        assert page.evaluate("innerHeight + scrollY < document.documentElement.scrollHeight - 200")
        shots.append(tmp_path / "transcript-scrolled-up.png")
        page.screenshot(path=str(shots[-1]))
        page.click("#jump")  # back to the live end, and following again
        page.wait_for_function(
            "() => document.body.dataset.follow === 'true' && innerHeight + scrollY >="
            " document.documentElement.scrollHeight - 48"
        )
        assert not page.is_visible("#jump")

        sender.join(seconds + 60)
        assert srv.server is not None
        entry = srv.server.hub.get("lf3")
        assert entry is not None and not entry.publishing
        page.wait_for_function(
            "() => Number(document.getElementById('transcript').dataset.lastSeq) >= "
            f"{entry.log.last_seq} && document.body.dataset.publishing === 'false'"
        )
        finals = [c for c in entry.log.finals() if c.text.strip()]
        turns = page_turns(page)
        assert turns == expected_turns(finals)
        assert len(turns) >= 20 and {w for w, _, _ in turns} >= {"Speaker 1", "Speaker 2"}
        # a turn per change of voice: two turns in a row are never one speaker's
        assert all(a[0] != b[0] for a, b in zip(turns, turns[1:], strict=False))
        assert not page.query_selector_all(".live"), "every partial was replaced by its final"
        assert (
            page.inner_text("#status") == "no one is publishing on 'lf3' now: the transcript so far"
        )

        looks = page.evaluate("window.looks")
        assert len(looks) > 100
        assert sum(x["wrong"] for x in looks) == 0  # no words under a name not theirs
        assert sum(1 for x in looks if x["unnamed"]) > 20  # unnamed words in a block of their own
        assert sum(x["inline"] for x in looks) == 0  # (lf3's partials are never named)
        assert all(x["atEnd"] for x in looks if x["follow"])
        scrolled = [x for x in looks if not x["follow"]]
        assert len(scrolled) > 5 and len({x["scrollY"] for x in scrolled}) == 1

        # the page's turns are the server's minutes (one stream: arrival order is time order)
        status, ctype, md = http_get(srv.url("/streams/lf3.md"))
        assert status == 200 and ctype.startswith("text/markdown")
        assert md_turns(md) == turns
        href = page.get_attribute("#dl-md", "href")
        assert (
            href == "/streams/lf3.md"
            and page.get_attribute("#dl-txt", "href") == "/streams/lf3.txt"
        )

        # a rename (one HTTP call, from this machine): every caption of a label shows the
        # name, past ones too; the turns regroup, as the server's minutes do
        names = {"Speaker 2": "Mary", "Speaker 4": "Mary"}
        req = urllib.request.Request(
            srv.url("/streams/lf3/names"), data=json.dumps(names).encode(),
            headers={"Content-Type": "application/json"},
        )  # fmt: skip
        with urllib.request.urlopen(req, timeout=10) as r:
            assert r.status == 200 and json.load(r)["names"] == names
        page.wait_for_function("() => (document.body.dataset.names || '').includes('Mary')")
        renamed_turns = page_turns(page)
        assert renamed_turns == expected_turns(finals, names)
        assert "Mary" in {w for w, _, _ in renamed_turns}
        assert not {"Speaker 2", "Speaker 4"} & {w for w, _, _ in renamed_turns}
        assert md_turns(http_get(srv.url("/streams/lf3.md"))[2]) == renamed_turns
        page.evaluate("window.scrollTo(0, 0)")
        shots.append(tmp_path / "transcript-renamed.png")
        page.screenshot(path=str(shots[-1]))

        # print: no controls, black on white, every turn
        page.emulate_media(media="print", color_scheme="dark")
        style = page.evaluate(
            """() => {
              const s = (sel, p) => getComputedStyle(document.querySelector(sel))[p];
              return { tools: s('#tools', 'display'), status: s('#status', 'display'),
                       jump: s('#jump', 'display'), text: s('.text', 'color'),
                       bg: getComputedStyle(document.documentElement).backgroundColor,
                       time: s('time', 'color'), bar: s('#bar', 'position') };
            }"""
        )
        assert style == {
            "tools": "none", "status": "none", "jump": "none", "text": "rgb(0, 0, 0)",
            "bg": "rgb(255, 255, 255)", "time": "rgb(0, 0, 0)", "bar": "static",
        }  # fmt: skip
        shots.append(tmp_path / "transcript-print.png")
        page.screenshot(path=str(shots[-1]), full_page=True)
        pdf = page.pdf(format="A4")
        assert pdf.startswith(b"%PDF") and len(pdf) > 20_000
    keep(*shots)
    assert not errors, errors


def test_a_rooms_turns_and_the_words_being_said_in_place(tmp_path: Path) -> None:
    """Two named publishers talking partly at once, with a view token: a partial that
    continues its speaker's turn is shown at the end of it, another speaker's in a block of its
    own under their name, replaced in place by the final; the token reaches the connection and
    the download links."""
    token = "v 2&"
    for name in ("room_ana", "room_ben"):
        SCRIPTS[name] = load(name)
    speed = 4.0
    seconds = max(e["at"] for n in ("room_ana", "room_ben") for e in load(n)) / speed + 1.0
    with scripted_server(speed, view_token=token) as srv, chromium() as browser:
        page = browser.new_page(viewport={"width": 900, "height": 700})
        errors = watch_errors(page)
        page.goto(srv.url("/transcript?stream=standup&token=v%202%26"))
        page.evaluate(PROBE)
        senders = [
            play(srv, "standup", "room_ana", seconds, "Ana"),
            play(srv, "standup", "room_ben", seconds, "Ben"),
        ]
        page.wait_for_selector(".turn:not(.live) .partial", timeout=60_000)
        shot = tmp_path / "transcript-room-partial-in-place.png"
        page.screenshot(path=str(shot))
        for s in senders:
            s.join(seconds + 60)
        assert srv.server is not None
        entry = srv.server.hub.get("standup")
        assert entry is not None and not entry.publishing
        page.wait_for_function(
            "() => Number(document.getElementById('transcript').dataset.lastSeq) >= "
            f"{entry.log.last_seq} && !document.querySelector('.live')"
        )
        finals = [c for c in entry.log.finals() if c.text.strip()]
        turns = page_turns(page)
        assert turns == expected_turns(finals)
        assert {w for w, _, _ in turns} == {"Ana", "Ben"} and len(turns) >= 4
        looks = page.evaluate("window.looks")
        assert sum(x["wrong"] for x in looks) == 0
        assert any(x["inline"] for x in looks) and any(x["own"] for x in looks)
        assert page.get_attribute("#dl-txt", "href") == "/streams/standup.txt?token=v%202%26"
        got = page.request.get(srv.url(page.get_attribute("#dl-md", "href") or ""))
        assert got.status == 200 and got.headers["content-type"].startswith("text/markdown")
        assert md_turns(got.text())  # the room's minutes: turns in the order they were said
        shots = [shot]
        for scheme in ("light", "dark"):  # every text at WCAG AA on the page, in both
            page.emulate_media(color_scheme=scheme)
            page.evaluate("window.scrollTo(0, 0)")
            contrasts = page.evaluate(CONTRASTS)
            print(scheme, {k: round(v, 1) for k, v in contrasts.items()})
            assert len(contrasts) == 7 and min(contrasts.values()) >= 4.5, (scheme, contrasts)
            shots.append(tmp_path / f"transcript-room-end-{scheme}.png")
            page.screenshot(path=str(shots[-1]))
        page.evaluate(
            """() => window.streamcapTranscript.show({type: 'partial', seq: 100000,
                 epoch: window.streamcapTranscript.model.epoch, segment: 999, text: 'and one more',
                 start: 60, end: 61, committed_chars: 0, speaker: 'Ben'})"""
        )  # a partial shown in the dark scheme too
        assert min(page.evaluate(CONTRASTS).values()) >= 4.5, page.evaluate(CONTRASTS)
    keep(*shots)
    assert not errors, errors


def _start(port: int, record: Path | None) -> ServerThread:
    config = ServerConfig(port=port, admission=False, record_dir=record)
    return ServerThread(config, FakeWorker(), stream_factory=scripted_factory(1.0)).start()


def _say(steps: queue.Queue[dict[str, Any]], segment: int, who: str, text: str, at: float) -> None:
    steps.put({"type": "final", "segment": segment, "text": text, "speaker": who,
               "start": at, "end": at + 1.0})  # fmt: skip


def test_reconnect_resumes_and_a_new_log_starts_over(tmp_path: Path) -> None:
    """The server restarts with its recording: the page reconnects with its seq and epoch and
    gets only what it missed (no turn twice). It restarts without one (a new log, a new
    epoch): the page starts over with the new log."""
    steps: queue.Queue[dict[str, Any]] = queue.Queue()
    SCRIPTS["transcript-steps"] = steps
    shots = []
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 800, "height": 500})
        errors = watch_errors(page)
        sockets: list[str] = []
        page.on("websocket", lambda ws: sockets.append(ws.url))
        srv = _start(0, tmp_path)
        port = srv.port
        try:
            page.goto(srv.url("/transcript?stream=talk"))
            with LivePublisher(srv, "talk", "transcript-steps"):
                _say(steps, 0, "Ana", "The first words.", 0.0)
                _say(steps, 1, "Ana", "Still Ana.", 1.5)
                page.wait_for_function("() => document.querySelectorAll('.final').length === 2")
            epoch = page.evaluate("window.streamcapTranscript.model.epoch")
            seq = last_seq(page)
        finally:
            srv.stop()
        page.wait_for_function("() => document.body.dataset.state === 'reconnecting'")
        assert "reconnecting" in page.inner_text("#status") or "not answering" in page.inner_text(
            "#status"
        )
        shots.append(tmp_path / "transcript-reconnecting.png")
        page.screenshot(path=str(shots[-1]))

        srv = _start(port, tmp_path)  # the same recording: the same log, read back
        try:
            with LivePublisher(srv, "talk", "transcript-steps"):
                _say(steps, 0, "Ben", "Ben after the restart.", 1.0)
                page.wait_for_function("() => document.querySelectorAll('.final').length === 3",
                                       timeout=30_000)  # fmt: skip
                time.sleep(0.5)  # nothing more comes (no final twice)
            assert page_turns(page)[0] == ("Ana", "00:00:00", "The first words. Still Ana.")
            assert [t[0] for t in page_turns(page)] == ["Ana", "Ben"]
            assert page.evaluate("window.streamcapTranscript.model.epoch") == epoch
            resumed = [u for u in sockets if f"since={seq}&" in u and f"epoch={epoch}" in u]
            assert resumed, sockets
        finally:
            srv.stop()

        srv = _start(port, None)  # no recording: a new log (another epoch)
        try:
            with LivePublisher(srv, "talk", "transcript-steps"):
                _say(steps, 0, "Cy", "A new meeting.", 0.0)
                page.wait_for_function(
                    "() => document.querySelectorAll('.final').length === 1", timeout=30_000
                )
            assert page_turns(page) == [("Cy", "00:00:00", "A new meeting.")]
            assert page.evaluate("window.streamcapTranscript.model.epoch") != epoch
        finally:
            srv.stop()
    keep(*shots)
    assert not errors or all("WebSocket" in e for e in errors), errors


def test_the_page_says_what_is_missing_and_serves_under_its_policy() -> None:
    """No stream in the address, or one the server would refuse: said in words, nothing
    connects. The page is served like the other pages: no inline script, the same CSP, the
    mic page links it."""
    config = ServerConfig(port=0, admission=False)
    with ServerThread(config, FakeWorker(), stream_factory=scripted_factory(1.0)) as srv:
        import urllib.request

        with urllib.request.urlopen(srv.url("/transcript?stream=x"), timeout=10) as r:
            csp = r.headers["Content-Security-Policy"]
            html = r.read().decode()
        assert "connect-src 'self';" in csp and "frame-ancestors" in csp
        assert "<script>" not in html and 'src="/static/transcript.js"' in html
        assert http_get(srv.url("/static/transcript.js"))[1].startswith("text/javascript")
        with chromium() as browser:
            page = browser.new_page()
            errors = watch_errors(page)
            page.goto(srv.url("/transcript"))
            assert page.inner_text("#status") == (
                "transcript: add ?stream=ID to the address (the mic page links its stream's "
                "transcript)"
            )
            assert not page.is_visible("#tools")
            page.goto(srv.url("/transcript.html?stream=..%2Fx"))
            assert "is not a stream id" in page.inner_text("#status")
            # the link `serve` prints at start opens the transcript of the mic page's stream
            assert srv.server is not None
            (line,) = [x for x in startup_lines(srv.server) if "transcript" in x]
            assert line == f"  transcript {srv.url('/transcript?stream=main')}"
            page.goto(line.split()[-1])
            page.wait_for_function("() => document.body.dataset.publishing === 'false'")
            assert page.inner_text("#status").startswith("waiting for stream 'main'")
            page.goto(srv.url("/?stream=standup&view_token=v%202"))
            link = page.get_attribute("#transcript-link", "href")
            assert link == srv.url("/transcript?stream=standup&token=v+2")
            assert page.get_attribute("#md-link", "href") == "/streams/standup.md?token=v%202"
            assert not errors, errors
