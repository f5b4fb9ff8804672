"""The mic page's "Enrol my voice" in real headless Chromium, recording from a real PulseAudio
virtual microphone (tests/pulse_mic.py: Chromium's default microphone, no fake-device flags)
that plays the librivox reader: type a name, press Record, and the page uploads its recording
to the real server (`POST /streams/ID/voices`), which embeds it with the real speaker model and
answers; the page says "Ada enrolled". A screenshot of the page is left for a person to look
at (``STREAMCAP_SHOTS``, default out/). Facts about this setup: ../shared/TESTING.md.
"""

from __future__ import annotations

import json
import os
import wave
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from streamcap.server.config import ServerConfig
from streamcap.server.thread import ServerThread

pytestmark = [pytest.mark.browser, pytest.mark.mic]

CHROMIUM = "/usr/bin/chromium"
ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
SHOTS = Path(os.environ.get("STREAMCAP_SHOTS", ROOT / "out"))


@pytest.fixture
def server() -> Iterator[ServerThread]:
    from serverkit import FakeWorker

    from streamcap.errors import UserError
    from streamcap.speakers.registry import default_model, encoder_for

    try:
        encoder_for(default_model())  # loaded now, not inside the page's upload
    except UserError as e:
        pytest.skip(f"no speaker model installed: {e}")
    config = ServerConfig(port=0, publish_token="pub", view_token="view", admission=False)
    with ServerThread(config, FakeWorker(), speakers="auto") as srv:
        yield srv


def test_enrol_my_voice_records_uploads_and_says_enrolled(
    server: ServerThread, pulse_mic: Any, tmp_path: Path
) -> None:
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} is not installed (apt-get install chromium)")
    sync_api = pytest.importorskip("playwright.sync_api")
    # the reader's two utterances, looped by the virtual microphone
    with wave.open(str(DATA / "en_real_librivox_0870.wav")) as w:
        a = np.frombuffer(w.readframes(w.getnframes()), "<i2")
    mic = tmp_path / "reader.wav"
    with wave.open(str(mic), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(np.concatenate([np.zeros(4000, "<i2"), a]).tobytes())
    pulse_mic.play(mic)
    with sync_api.sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            str(tmp_path / "profile"),
            executable_path=CHROMIUM,
            headless=True,
            args=[
                "--use-fake-ui-for-media-stream",  # allow the microphone; the device is real
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
            ],
            env={**os.environ, "PULSE_SERVER": pulse_mic.server},
            viewport={"width": 900, "height": 900},
        )
        try:
            page = context.pages[0] if context.pages else context.new_page()
            page.goto(server.url("/?stream=meet&token=pub&view_token=view&enrol_s=4"))
            expect = sync_api.expect
            # refused first: no name
            page.click("#enrol-record")
            expect(page.locator("#enrol-status")).to_have_text("type the name to enrol first")
            page.fill("#enrol-name", "Ada")
            page.click("#enrol-record")
            expect(page.locator("#enrol-read")).to_be_visible()
            expect(page.locator("#enrol-status")).to_contain_text("recording")
            level = page.locator("#enrol-level")
            widths = []
            for _ in range(40):  # the level moves: sound is coming in (the page's CSP: no eval)
                widths.append(
                    float((level.get_attribute("style") or "0").split(":")[-1].strip(" %;") or 0)
                )
                if widths[-1] > 5:
                    break
                page.wait_for_timeout(100)
            assert widths[-1] > 5, widths
            SHOTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(SHOTS / "enrol-recording.png"), full_page=True)
            status = page.locator("#enrol-status")
            expect(status).to_contain_text("Ada enrolled in meet", timeout=30_000)
            page.screenshot(path=str(SHOTS / "enrol-page.png"), full_page=True)
            assert page.locator("#enrol-status.done").count() == 1
            speech = float(status.inner_text().split(": ")[1].split(" s")[0])
            assert 2.0 <= speech <= 4.0, status.inner_text()
            # the server kept it for the stream (the view token lists it)
            body = page.evaluate("fetch('/streams/meet/voices?token=view').then((r) => r.text())")
            assert json.loads(body) == {"stream": "meet", "voices": ["Ada"]}
            # the same name again, stopped early: the server's refusal, shown on the page
            page.click("#enrol-record")
            expect(page.locator("#enrol-record")).to_have_text("Stop")
            page.click("#enrol-record")
            expect(status).to_contain_text(
                "not enrolled: Ada is enrolled in meet already", timeout=30_000
            )
            assert page.locator("#enrol-status.error").count() == 1
        finally:
            context.close()
