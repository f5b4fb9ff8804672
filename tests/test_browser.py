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

from streamcap.server.config import ServerConfig
from streamcap.server.thread import ServerThread

pytestmark = [pytest.mark.browser, pytest.mark.model]

CHROMIUM = "/usr/bin/chromium"
OUT = Path(__file__).resolve().parent.parent / "out"


@pytest.fixture(scope="module")
def server(engine: Any) -> Iterator[ServerThread]:
    from streamcap.worker import InferenceWorker

    worker = InferenceWorker(engine).start()
    try:
        config = ServerConfig(port=0, publish_token="pub", view_token="view")
        with ServerThread(config, worker) as srv:
            yield srv
    finally:
        worker.stop()


@pytest.fixture
def browser(tmp_path: Path, speech: dict) -> Iterator[Any]:
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} is not installed (apt-get install chromium)")
    sync_api = pytest.importorskip("playwright.sync_api")
    # Capture starts when the device opens and the first ~0.25 s are lost: pad with silence.
    wav = tmp_path / "mic.wav"
    silence = np.zeros(16000, np.float32)
    sf.write(wav, np.concatenate([silence, speech["en_real_jfk"], silence, silence]), 16000)
    with sync_api.sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            str(tmp_path / "profile"),
            executable_path=CHROMIUM,
            headless=True,
            args=[
                "--use-fake-ui-for-media-stream",
                "--use-fake-device-for-media-stream",
                f"--use-file-for-fake-audio-capture={wav}%noloop",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
            ],
            viewport={"width": 1280, "height": 720},
        )
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
    overlay.goto(server.url("/overlay?stream=browser&token=view&lines=3&size=36&bg=000000aa"))
    mic = browser.new_page()
    mic.on("pageerror", lambda e: errors.append(f"mic: {e}"))
    mic.goto(server.url("/?stream=browser&token=pub&view_token=view"))
    expect(mic.locator("#overlay-link")).to_contain_text("/overlay?stream=browser&token=view")
    mic.click("#start")  # a real click: the AudioContext may start without autoplay flags
    expect(mic.locator("body")).to_have_attribute("data-state", "live", timeout=30_000)

    # The whole clip: the second sentence comes after a pause and ends the audio.
    words = re.compile(r"fellow\s+americans.*you\s+can\s+do\s+for\s+your\s+country", re.I | re.S)
    expect(overlay.locator("#box")).to_contain_text(words, timeout=90_000)
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
