"""A real browser end to end: Debian chromium (driven by Playwright) opens the mic page, its
microphone (chromium's fake capture device playing a speech WAV) feeds the caption server with
the real model, and the overlay in a second tab shows the words.

Only the sound card is replaced, by chromium's own file-backed capture device (there is no sound
card here). Facts about this setup: ../shared/TESTING.md.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile as sf
from browserkit import launch, need_chromium

from streamcap.server.config import ServerConfig
from streamcap.server.thread import ServerThread

pytestmark = [pytest.mark.browser, pytest.mark.model]

OUT = Path(__file__).resolve().parents[2] / "out"


@pytest.fixture(scope="module")
def server(engine: Any) -> Iterator[ServerThread]:
    from streamcap.runtime.worker import InferenceWorker

    worker = InferenceWorker(engine).start()
    try:
        # admission off: two publishers at once (the room test) exceed this CPU's capacity
        config = ServerConfig(port=0, publish_token="pub", view_token="view", admission=False)
        with ServerThread(config, worker) as srv:
            yield srv
    finally:
        worker.stop()


@pytest.fixture
def browser(tmp_path: Path, speech: dict) -> Iterator[Any]:
    sync_api = need_chromium()
    # Capture starts when the device opens and the first ~0.25 s are lost: pad with silence.
    wav = tmp_path / "mic.wav"
    silence = np.zeros(16000, np.float32)
    sf.write(wav, np.concatenate([silence, speech["en_real_jfk"], silence, silence]), 16000)
    with sync_api.sync_playwright() as pw:
        context = launch(pw, tmp_path / "profile", wav, viewport=(1280, 720))
        try:
            yield context
        finally:
            context.close()


def test_mic_page_feeds_server_and_overlay_shows_words(
    server: ServerThread, browser: Any, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    errors: list[str] = []
    overlay = browser.new_page()
    overlay.on("pageerror", lambda e: errors.append(f"overlay: {e}"))
    # Opened first: the overlay waits for a stream that does not exist yet.
    # hold=0: on a loaded machine a final's latency can exceed the pause before the next one,
    # and the default hold would rightly clear the screen between them
    overlay.goto(
        server.url("/overlay?stream=browser&token=view&lines=3&size=36&bg=000000aa&hold=0")
    )
    mic = browser.new_page()
    mic.on("pageerror", lambda e: errors.append(f"mic: {e}"))
    mic.goto(server.url("/?stream=browser&token=pub&view_token=view&speaker=Zoe"))
    expect(mic.locator("#overlay-link")).to_contain_text("/overlay?stream=browser&token=view")
    mic.click("#start")  # a real click: the AudioContext may start without autoplay flags
    expect(mic.locator("body")).to_have_attribute("data-state", "live", timeout=30_000)

    # The whole clip: the second sentence comes after a pause and ends the audio.
    words = re.compile(r"fellow\s+americans.*you\s+can\s+do\s+for\s+your\s+country", re.I | re.S)
    expect(overlay.locator("#box")).to_contain_text(words, timeout=90_000)
    expect(mic.locator("#captions")).to_contain_text("Zoe: ", timeout=30_000)  # its name field
    expect(mic.locator("#captions")).to_contain_text(words, timeout=30_000)
    # Only whole words on a line, never more lines than asked for.
    lines = overlay.locator("#box .line")
    expect(lines).to_have_count(3)

    mic.click("#stop")
    expect(mic.locator("#status")).to_contain_text("stopped", timeout=60_000)
    # After the stop every word is final: nothing dimmed is left on the overlay.
    expect(overlay.locator("#box .partial")).to_have_count(0, timeout=30_000)
    shot = tmp_path / "overlay.png"
    overlay.screenshot(path=str(shot), omit_background=True)
    mic.screenshot(path=str(tmp_path / "mic.png"))
    OUT.mkdir(exist_ok=True)
    shutil.copyfile(shot, OUT / "overlay.png")
    shutil.copyfile(tmp_path / "mic.png", OUT / "mic-page.png")
    assert not errors, errors
    entry = server.server.hub.get("browser") if server.server else None
    assert entry is not None and not entry.publishing
    assert words.search(" ".join(c.text for c in entry.log.finals()))
    assert {c.speaker for c in entry.log.finals()} == {"Zoe"}


def test_overlay_names_the_speakers_of_a_room(
    server: ServerThread, browser: Any, speech: dict, tmp_path: Path
) -> None:
    """Two publishers in one room, Python clients on loopback; the overlay in chromium puts
    each one's name, in its own colour, before their words."""
    import asyncio
    import threading

    from playwright.sync_api import expect

    from streamcap.server.client import publish, ws_url

    errors: list[str] = []
    overlay = browser.new_page()
    overlay.on("pageerror", lambda e: errors.append(str(e)))
    overlay.goto(server.url("/overlay?stream=room&token=view&lines=4&size=30&bg=000000aa&hold=0"))
    root = server.url("", websocket=True)
    gap = np.zeros(16000, np.float32)
    ana = np.concatenate([gap, speech["en_real_forever"], gap, gap, gap, gap, gap])
    ben = np.concatenate([gap, gap, gap, gap, gap, speech["en_real_goforward"], gap])

    def run(name: str, audio: np.ndarray) -> None:
        url = ws_url(root, "ingest", "room", token="pub", speaker=name)
        asyncio.run(publish(url, audio, 16000))

    threads = [threading.Thread(target=run, args=a) for a in (("Ana", ana), ("Ben", ben))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(90)
    box = overlay.locator("#box")
    expect(box).to_contain_text(re.compile(r"Ana:.*forever.*Ben:.*go forward", re.I | re.S),
                                timeout=60_000)  # fmt: skip
    names = overlay.locator("#box .speaker")
    expect(names).to_have_text(["Ana:", "Ben:"])
    colours = names.evaluate_all("els => els.map(e => getComputedStyle(e).color)")
    assert len(set(colours)) == 2, colours
    shot = tmp_path / "room.png"
    overlay.screenshot(path=str(shot), omit_background=True)
    OUT.mkdir(exist_ok=True)
    shutil.copyfile(shot, OUT / "overlay-room.png")
    assert not errors, errors


def test_overlay_and_mic_page_say_which_token_was_refused(
    server: ServerThread, browser: Any
) -> None:
    from playwright.sync_api import expect

    overlay = browser.new_page()
    overlay.goto(server.url("/overlay?stream=locked&token=wrong"))  # no ?debug: still shown
    status = overlay.locator("#status")
    expect(status).to_be_visible(timeout=15_000)
    expect(status).to_contain_text("view token missing or wrong")
    expect(overlay.locator("body")).to_have_attribute("data-state", "error")

    mic = browser.new_page()
    mic.goto(server.url("/?stream=locked&token=not-it&view_token=view"))
    mic.click("#start")
    expect(mic.locator("#status")).to_contain_text("publish token missing or wrong", timeout=30_000)


def test_caption_model_follows_the_epoch_rule(server: ServerThread, browser: Any) -> None:
    page = browser.new_page()
    page.goto(server.url("/overlay?stream=rule&token=view"))
    result = page.evaluate(
        """() => {
        const m = new Streamcap.CaptionModel();
        const ev = (seq, epoch, text) =>
          ({type: "final", seq, epoch, segment: seq, text, committed_chars: 0});
        const out = [];
        out.push(m.apply(ev(1, "A", "one")), m.apply(ev(2, "A", "two")));
        out.push(m.apply(ev(2, "A", "two")));            // a duplicate: ignored
        const conn = new Streamcap.CaptionConnection({server: "ws://x", stream: "rule", model: m});
        const url = conn.url();
        out.push(m.apply(ev(1, "B", "new run")));        // another log: start over
        return {out, url, text: m.committedText(), epoch: m.epoch, last: m.lastSeq};
      }"""
    )
    assert result["out"] == ["final", "final", "", "reset+final"]
    assert "since=2" in result["url"] and "epoch=A" in result["url"]
    assert result["text"] == "new run" and result["epoch"] == "B" and result["last"] == 1


def test_overlay_starts_over_after_a_server_restart(
    engine: Any, browser: Any, speech: dict
) -> None:
    """A server restarted without a recording is another log (new epoch): the overlay, which
    reconnects with its old `since`, must drop the old run's words and show the new run's."""
    import asyncio
    import threading

    from playwright.sync_api import expect

    from streamcap.runtime.worker import InferenceWorker
    from streamcap.server.client import publish, ws_url

    def say(srv: ServerThread, clip: str) -> None:
        audio = np.concatenate(
            [np.zeros(4800, np.float32), speech[clip], np.zeros(16000, np.float32)]
        )
        url = ws_url(srv.url("", websocket=True), "ingest", "restart")
        # Playwright's sync API runs an event loop in this thread: publish from another one.
        t = threading.Thread(target=lambda: asyncio.run(publish(url, audio, 16000)))
        t.start()
        t.join(120)

    worker = InferenceWorker(engine).start()
    try:
        with ServerThread(ServerConfig(port=0), worker) as first:
            port = first.port
            overlay = browser.new_page()
            overlay.goto(first.url("/overlay?stream=restart&lines=3"))
            say(first, "en_real_praatio_mary")
            expect(overlay.locator("#box")).to_contain_text(
                re.compile("barrel", re.I), timeout=60_000
            )
            say(first, "en_real_librivox_0880")  # the old run's log grows past the new one's
            expect(overlay.locator("#box")).to_contain_text(
                re.compile("disposed", re.I), timeout=60_000
            )
        with ServerThread(ServerConfig(port=port), worker) as second:
            say(second, "en_real_goforward")
            box = overlay.locator("#box")
            expect(box).to_contain_text(re.compile("forward", re.I), timeout=60_000)
            expect(box).not_to_contain_text(re.compile("barrel|disposed", re.I))
    finally:
        worker.stop()
