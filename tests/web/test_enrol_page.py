"""The mic page's "Enrol my voice" in real headless Chromium, recording from a real PulseAudio
virtual microphone (tests/pulse_mic.py: Chromium's default microphone, no fake-device flags)
that plays the librivox reader: type a name, press Record, and the page uploads its recording
to the real server (`POST /streams/ID/voices`), which embeds it with the real speaker model and
answers; the page says "Ada enrolled". The same name again is refused (409), and the page
offers to replace that sample: its button says "Replace", and the next recording does (sent with
``&replace=1``); Forget takes the name back (``DELETE``). Screenshots of the page are left
for a person to look at (``STREAMCAP_SHOTS``, default out/). Facts about this setup:
../shared/TESTING.md.
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
from browserkit import launch, need_chromium

from streamcap.server.config import ServerConfig
from streamcap.server.thread import ServerThread

pytestmark = [pytest.mark.browser, pytest.mark.mic]

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
    sync_api = need_chromium()
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
        env = {**os.environ, "PULSE_SERVER": pulse_mic.server}  # the device is real
        context = launch(pw, tmp_path / "profile", "default", viewport=(900, 900), env=env)
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
            listed = json.loads(body)
            assert listed["voices"] == ["Ada"] and listed["enrolled"][0]["speech_s"] == speech
            # the same name again, stopped early: the server's refusal, shown on the page
            page.click("#enrol-record")
            expect(page.locator("#enrol-record")).to_have_text("Stop")
            page.click("#enrol-record")
            expect(status).to_contain_text(
                "not enrolled: Ada is enrolled in meet already", timeout=30_000
            )
            assert page.locator("#enrol-status.error").count() == 1
            # ... and the page offers to replace the sample: the next recording replaces it
            expect(status).to_contain_text("Press Replace")
            expect(page.locator("#enrol-record")).to_have_text("Replace")
            page.screenshot(path=str(SHOTS / "enrol-replace-offered.png"), full_page=True)
            page.click("#enrol-record")
            expect(status).to_contain_text("Ada's sample replaced in meet", timeout=30_000)
            expect(page.locator("#enrol-record")).to_have_text("Record")
            page.screenshot(path=str(SHOTS / "enrol-replaced.png"), full_page=True)
            # Forget takes the name back: the server lists no voice, and a second time says so
            page.click("#enrol-forget")
            expect(status).to_contain_text(
                "Ada forgotten in meet: the voice is not named any more", timeout=30_000
            )
            page.screenshot(path=str(SHOTS / "enrol-forgotten.png"), full_page=True)
            body = page.evaluate("fetch('/streams/meet/voices?token=view').then((r) => r.text())")
            assert json.loads(body)["voices"] == []
            page.click("#enrol-forget")
            expect(status).to_contain_text("not forgotten: Ada is not enrolled in meet")
            page.fill("#enrol-name", "")
            page.click("#enrol-forget")
            expect(status).to_have_text("type the name to forget first")
        finally:
            context.close()
