"""Word-level captions (`highlight=words`) in real headless chromium: real speech published to a
real caption server on loopback (the bundled model), the overlay's highlighted word followed
as the page shows it.

These tests also make the screenshots of docs/obs.md: with STREAMCAP_DOC_SHOTS=1 they write
them into docs/img/ (cropped to the caption box, over a half light, half dark scene), else into
the test's temporary folder.
"""

# ruff: noqa: F811 - `browser` is test_browser's chromium fixture, imported to be a parameter
from __future__ import annotations

import asyncio
import os
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_browser import browser  # noqa: F401 - the shared chromium fixture

from streamcap.server.client import publish, ws_url
from streamcap.server.config import ServerConfig
from streamcap.server.thread import ServerThread

pytestmark = [pytest.mark.browser, pytest.mark.model]

DOC_IMG = Path(__file__).resolve().parents[2] / "docs" / "img"
# A scene behind the transparent page for the screenshots: light left half, dark right half.
SCENE = "html { background: linear-gradient(90deg, #eceff1 0 50%, #263238 50% 100%) !important; }"
# Every 10 ms, for each speaker, the word that has `.now` when it changes: [ms, its start, its
# text]. Two speakers' read-alongs can light a word each at the same moment: both are recorded.
RECORDER = """() => {
  window.nowLog = [];
  const last = new Map();
  setInterval(() => {
    const lit = new Map();
    for (const el of document.querySelectorAll("#box .now")) {
      if (!lit.has(el.dataset.who)) lit.set(el.dataset.who, el);
    }
    for (const who of last.keys()) if (!lit.has(who)) last.set(who, null);
    for (const [who, el] of lit) {
      if (last.get(who) === el.dataset.start) continue;
      last.set(who, el.dataset.start);
      window.nowLog.push({t: performance.now(), who: el.dataset.who,
                          start: Number(el.dataset.start), word: el.textContent});
    }
  }, 10);
}"""


# Every 20 ms: count the moments a speaker has two lit words (`window.twoLit`).
ONE_EACH = """() => {
  window.twoLit = 0;
  setInterval(() => {
    const whos = [...document.querySelectorAll('#box .now')].map((el) => el.dataset.who);
    if (new Set(whos).size !== whos.length) window.twoLit++;
  }, 20);
}"""


@pytest.fixture(scope="module")
def server(worker: Any) -> Iterator[ServerThread]:
    with ServerThread(ServerConfig(port=0), worker) as srv:
        yield srv


def _send(server: ServerThread, stream: str, audio: np.ndarray, speaker: str = "") -> Any:
    url = ws_url(server.url("", websocket=True), "ingest", stream, speaker=speaker or None)
    sender = threading.Thread(target=lambda: asyncio.run(publish(url, audio, 16000)))
    sender.start()
    return sender


def _shot(page: Any, name: str, tmp_path: Path) -> Path:
    """The caption box and 20 px around it, over SCENE."""
    page.add_style_tag(content=SCENE)
    box = page.locator("#box").bounding_box()
    assert box is not None
    clip = {"x": box["x"] - 20, "y": box["y"] - 20, "width": box["width"] + 40}
    clip["height"] = box["height"] + 40
    path = (DOC_IMG if os.environ.get("STREAMCAP_DOC_SHOTS") == "1" else tmp_path) / name
    page.screenshot(path=str(path), clip=clip)
    return path


# Every 50 ms: the lit word, whether it is a partial's, and the newest word on screen.
LIVE = """() => {
  window.liveLog = [];
  setInterval(() => {
    const words = [...document.querySelectorAll('#box [data-start]')];
    const lit = document.querySelector('#box .now');
    window.liveLog.push({ t: performance.now(), lit: lit ? lit.textContent : null,
      partial: !!(lit && lit.matches('.partial, .stable')),
      newest: words.length ? words[words.length - 1].textContent : null,
      finals: window.streamcapOverlay.model.finals.length });
  }, 50);
}"""


def test_highlighted_word_follows_the_speech(
    server: ServerThread, browser: Any, speech: dict, tmp_path: Path
) -> None:
    """The read-along of finals (`partial=hidden`: words come only with the final), and, on
    a second overlay of the same speech, the live highlight: the word being said, a partial's
    while the sentence goes on, the newest word on screen."""
    from playwright.sync_api import expect

    page = browser.new_page()
    page.set_viewport_size({"width": 1920, "height": 1080})
    page.goto(server.url("/overlay?stream=kara&highlight=words&lines=2&hold=0&partial=hidden"))
    page.evaluate(RECORDER)
    live = browser.new_page()
    live.set_viewport_size({"width": 1920, "height": 1080})
    live.goto(server.url("/overlay?stream=kara&highlight=words&lines=2&hold=0"))
    live.evaluate(LIVE)
    gap = np.zeros(8000, np.float32)
    sender = _send(server, "kara", np.concatenate([gap, speech["en_real_jfk"], gap]))
    try:
        box = page.locator("#box")
        # mid-sentence, live: a partial's word is lit while the sentence goes on
        live.wait_for_function("() => window.liveLog.some((p) => p.partial)", timeout=90_000)
        _shot(live, "overlay-words.png", tmp_path)
        expect(box).to_contain_text(re.compile(r"for\s+your\s+country", re.I), timeout=90_000)
        page.wait_for_function(
            "() => window.streamcapOverlay.clock.remaining(performance.now()) === 0", timeout=30_000
        )
    finally:
        sender.join(120)
    # live: once a word is lit, it is the newest on screen (the light goes out after the
    # speaker's last final), partial words included, and partials came while finals did not
    polls = live.evaluate("window.liveLog")
    lit = [p for p in polls if p["lit"]]
    assert any(p["partial"] for p in lit), lit[:5]
    partial_at = [p["finals"] for p in lit if p["partial"]]
    assert len(set(partial_at)) >= 2, partial_at  # lit between finals, not only after one
    assert all(p["lit"] == p["newest"] for p in lit), [p for p in lit if p["lit"] != p["newest"]]
    live.wait_for_function("() => !document.querySelector('#box .now')", timeout=10_000)
    log = page.evaluate("window.nowLog")
    finals = page.evaluate("window.streamcapOverlay.model.finals")
    assert finals and all(f["times"] for f in finals), finals  # every final came with word times
    timed = {(f["times"][i][0], w) for f in finals for i, w in enumerate(f["text"].split())}
    n_words = len(timed)
    # each highlighted word is a final's word at its own start time, in the order spoken
    assert all((e["start"], e["word"]) in timed for e in log), (log, timed)
    starts = [e["start"] for e in log]
    assert starts == sorted(starts) and len(set(starts)) == len(starts), starts
    assert len(log) >= 0.8 * n_words, (len(log), n_words)  # a 10 ms look misses few words
    # at the pace it was spoken: wall time between highlights tracks the words' audio times
    # (the read-along jumps between finals, so within each final only)
    by_final = [{t[0] for t in f["times"]} for f in finals]
    wall = audio = 0.0
    for a, b in zip(log, log[1:], strict=False):
        if any(a["start"] in s and b["start"] in s for s in by_final):
            wall += (b["t"] - a["t"]) / 1000
            audio += b["start"] - a["start"]
    print(
        f"read-along: {len(log)} of {n_words} words lit; {wall:.2f} s wall for {audio:.2f} s audio"
    )
    assert audio > 3.0, audio
    assert 0.85 < wall / audio < 1.2, (wall, audio)
    expect(page.locator("#box .now")).to_have_count(0)  # played through: nothing is left lit
    _shot(page, "overlay.png", tmp_path)


def test_each_speaker_of_a_room_has_their_own_lit_word(
    server: ServerThread, browser: Any, speech: dict, tmp_path: Path
) -> None:
    """Two publishers in one room, each with its own audio clock: both get their words lit,
    at most one word each at a time."""
    page = browser.new_page()
    page.set_viewport_size({"width": 1920, "height": 1080})
    page.goto(server.url("/overlay?stream=kroom&highlight=words&lines=3&size=36&hold=0"))
    page.evaluate(RECORDER)
    page.evaluate(ONE_EACH)
    gap = np.zeros(16000, np.float32)
    ana = np.concatenate([gap, speech["en_real_forever"], gap])
    ben = np.concatenate([gap, gap, gap, speech["en_real_goforward"], gap])
    senders = [_send(server, "kroom", ana, "Ana"), _send(server, "kroom", ben, "Ben")]
    try:
        both = "() => new Set(window.nowLog.map((e) => e.who)).size === 2"
        page.wait_for_function(both + " && document.querySelector('.now')", timeout=90_000)
        _shot(page, "overlay-room.png", tmp_path)
    finally:
        for s in senders:
            s.join(120)
    names = page.locator("#box .speaker").all_inner_texts()
    assert {"Ana:", "Ben:"} <= set(names), names
    log = page.evaluate("window.nowLog")
    for who in ("Ana", "Ben"):
        assert [e for e in log if e["who"] == who], (who, log)
    assert page.evaluate("window.twoLit") == 0, "a speaker had two words lit at once"
