"""Issue 37, item 7: the link that works. In real headless chromium against a real caption
server on loopback (no model: a stand-in stream or canned events, `overlaykit`):

- the overlay says in words when nobody publishes on its stream (the server's `status`
  messages), and when the caption server does not answer (instead of a raw `1006`), on the
  edge away from the captions and never over captions on screen;
- the start-up pair of links (`streamcap.server.links`) works as printed: the mic page of the
  link publishes the stream the overlay of the link shows, and the mic page without a stream
  in its URL publishes that same default stream.

Only the sound card is replaced, by chromium's own fake capture device (a beep).
"""

from __future__ import annotations

import os
import queue
import shutil
import socket
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from overlaykit import SCENE, SCRIPTS, LivePublisher, chromium, scripted_server
from serverkit import FakeWorker, fake_factory

from streamcap.server.config import ServerConfig
from streamcap.server.links import DEFAULT_STREAM, stream_links
from streamcap.server.thread import ServerThread

pytestmark = [pytest.mark.browser]

SHOTS = os.environ.get("STREAMCAP_SHOTS_DIR")


def _keep(tmp_path: Path) -> None:
    """`STREAMCAP_SHOTS_DIR=DIR`: the test's screenshots are copied there."""
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        for shot in tmp_path.glob("*.png"):
            shutil.copyfile(shot, Path(SHOTS) / f"status-{shot.name}")


def _status(page: Any) -> list[dict[str, Any]]:
    """The status line's messages, whether each is a notice (grey) or an alert (red)."""
    return list(
        page.evaluate(
            """() => [...document.querySelectorAll('#status > div')].map((d) => ({
                 text: d.textContent, notice: d.classList.contains('notice'),
                 shown: getComputedStyle(document.getElementById('status')).display !== 'none',
               }))"""
        )
    )


def _apart(page: Any) -> None:
    """The status line and every caption line with words are on screen and do not overlap."""
    boxes = page.evaluate(
        """() => {
          const r = (el) => { const b = el.getBoundingClientRect();
                              return [b.left, b.top, b.right, b.bottom]; };
          return { status: r(document.getElementById('status')),
                   lines: [...document.querySelectorAll('#box .line > span')].map(r) };
        }"""
    )
    s = boxes["status"]
    assert s[3] > s[1] and boxes["lines"], boxes
    for line in boxes["lines"]:
        overlap = s[0] < line[2] and line[0] < s[2] and s[1] < line[3] and line[1] < s[3]
        assert not overlap, boxes


def test_the_overlay_says_when_nobody_publishes(tmp_path: Path) -> None:
    from playwright.sync_api import expect

    steps: queue.Queue[dict[str, Any]] = queue.Queue()
    SCRIPTS["status-steps"] = steps
    with scripted_server() as srv, chromium() as browser:
        errors: list[str] = []
        pages = {}
        for name, params in {
            "keep": "hold=0",  # the captions stay on screen
            "fade": "hold=1",  # they clear 1 s after the speech
            "top": "hold=0&position=top",  # the captions at the top: the status at the bottom
        }.items():
            page = browser.new_page(viewport={"width": 1280, "height": 720})
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(srv.url(f"/overlay?stream=show&{params}"))
            page.add_style_tag(content=SCENE)
            pages[name] = page
        waiting = (
            "captions: waiting for stream 'show': no one is publishing on it yet "
            "(on the mic page: Stream id show, then Start)"
        )
        for page in pages.values():
            expect(page.locator("body")).to_have_attribute("data-publishing", "false")
            assert _status(page) == [{"text": waiting, "notice": True, "shown": True}]
        pages["keep"].screenshot(path=str(tmp_path / "waiting.png"))
        with LivePublisher(srv, "show", "status-steps"):
            for page in pages.values():  # someone publishes: nothing to say yet
                expect(page.locator("body")).to_have_attribute("data-publishing", "true")
                expect(page.locator("#status")).to_be_hidden()
            steps.put({"type": "final", "segment": 0, "text": "Good evening and welcome."})
            for page in pages.values():
                expect(page.locator("#box")).to_contain_text("Good evening and welcome.")
        # nobody publishes now: no word of it over the captions still on screen ...
        for name in ("keep", "top"):
            expect(pages[name].locator("body")).to_have_attribute("data-publishing", "false")
            pages[name].wait_for_timeout(300)
            expect(pages[name].locator("#status")).to_be_hidden()
            assert pages[name].locator("#box .line > span").count() == 1
        # ... and once they cleared, it says so
        now = "captions: no one is publishing on stream 'show' now"
        expect(pages["fade"].locator("#status")).to_have_text(now, timeout=10_000)
        assert pages["fade"].evaluate("document.getElementById('box').style.opacity") == "0"
        pages["fade"].screenshot(path=str(tmp_path / "stopped.png"))
        # the status line sits away from the captions: at the top, or the bottom for top
        for name, edge in (("keep", "top"), ("top", "bottom")):
            style = pages[name].evaluate("document.getElementById('status').style.cssText")
            assert f"{edge}: 4px" in style, (name, style)
        assert not errors, errors
    _keep(tmp_path)


def test_the_overlay_says_when_the_server_does_not_answer(tmp_path: Path) -> None:
    from playwright.sync_api import expect

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    steps: queue.Queue[dict[str, Any]] = queue.Queue()
    SCRIPTS["away-steps"] = steps
    with chromium() as browser:
        with scripted_server() as srv:
            # an overlay told to use a caption server that is not there
            lost = browser.new_page(viewport={"width": 1280, "height": 720})
            lost.goto(srv.url(f"/overlay?stream=show&server=ws://127.0.0.1:{dead}"))
            away = f"the caption server at ws://127.0.0.1:{dead} is not answering; retrying in"
            expect(lost.locator("#status")).to_contain_text(away, timeout=10_000)
            [msg] = _status(lost)
            assert msg["text"].startswith("captions: " + away) and not msg["notice"], msg
            assert "1006" not in msg["text"]
            # an overlay showing captions when its server goes away
            page = browser.new_page(viewport={"width": 1280, "height": 720})
            page.goto(srv.url("/overlay?stream=show&hold=0&lines=3"))
            page.add_style_tag(content=SCENE)
            with LivePublisher(srv, "show", "away-steps"):
                steps.put({"type": "final", "segment": 0, "text": "Still on screen."})
                expect(page.locator("#box")).to_contain_text("Still on screen.")
            server = srv.url("", websocket=True)
        # the server has stopped: the overlay says so, over none of the captions
        gone = f"captions: the caption server at {server} is not answering; retrying in"
        expect(page.locator("#status")).to_contain_text(gone, timeout=15_000)
        expect(page.locator("#box")).to_contain_text("Still on screen.")
        _apart(page)
        page.screenshot(path=str(tmp_path / "server-away.png"))
        lost.screenshot(path=str(tmp_path / "server-never-answered.png"))
    _keep(tmp_path)


def test_a_stream_not_started_yet_on_a_rejecting_server_is_a_notice() -> None:
    from playwright.sync_api import expect

    with scripted_server(unknown_stream="reject") as srv, chromium() as browser:
        page = browser.new_page()
        page.goto(srv.url("/overlay?stream=later"))
        expect(page.locator("#status")).to_contain_text(
            "captions: waiting for stream 'later': no one is publishing on it yet", timeout=10_000
        )
        [msg] = _status(page)
        assert msg["notice"] and "retrying in" in msg["text"] and "1008" not in msg["text"]


def test_the_printed_pair_of_links_shows_what_the_mic_page_publishes(tmp_path: Path) -> None:
    """The links `serve` prints: the overlay of the pair shows the stream the mic page of the
    pair publishes; the mic page without a stream in its URL publishes the same one."""
    from playwright.sync_api import expect

    config = ServerConfig(port=0, admission=False, publish_token="p-1", view_token="v 2&")
    mic_flags = ["--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream"]
    with (
        ServerThread(config, FakeWorker(), stream_factory=fake_factory) as srv,
        chromium(*mic_flags) as browser,
    ):
        links = stream_links(srv.url(""), publish_token="p-1", view_token="v 2&")
        assert links.overlay == srv.url("/overlay?stream=main&token=v%202%26")
        overlay = browser.new_page(viewport={"width": 1280, "height": 720})
        overlay.goto(links.overlay)
        expect(overlay.locator("#status")).to_contain_text("waiting for stream 'main'")
        mic = browser.new_page()
        mic.goto(links.mic)
        assert mic.input_value("#stream") == DEFAULT_STREAM == "main"
        assert mic.input_value("#token") == "p-1" and mic.input_value("#view") == "v 2&"
        shown = urlsplit(mic.locator("#overlay-link").get_attribute("href") or "")
        printed = urlsplit(links.overlay)
        assert shown[:3] == printed[:3] and parse_qs(shown.query) == parse_qs(printed.query)
        mic.click("#start")
        expect(mic.locator("body")).to_have_attribute("data-state", "live", timeout=30_000)
        expect(overlay.locator("#box")).to_contain_text("final", timeout=30_000)
        expect(overlay.locator("#status")).to_be_hidden()
        overlay.add_style_tag(content=SCENE)
        overlay.screenshot(path=str(tmp_path / "pair.png"))
        mic.click("#stop")
        expect(mic.locator("#status")).to_contain_text("stopped", timeout=30_000)
        # without a stream in its URL, the mic page fills in the same default
        plain = browser.new_page()
        plain.goto(srv.url("/"))
        assert plain.input_value("#stream") == DEFAULT_STREAM
        plain.reload()
        assert plain.input_value("#stream") == DEFAULT_STREAM  # not a new one per load
    _keep(tmp_path)
