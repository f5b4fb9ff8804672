"""Issue 37, item 4, the pages' side: after `POST /streams/ID/names` ("Speaker 2" -> "Mary")
the overlay and the mic page relabel the captions already on screen (the server's `names`
message), and what comes next arrives renamed. Canned events through a real caption server
(`overlaykit`: the decoding replaced by the events the test sends) to real headless chromium;
the rename is a real HTTP call from this machine (the server has no publish token: loopback).
"""

from __future__ import annotations

import json
import queue
import shutil
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from overlaykit import SCENE, SCRIPTS, LivePublisher, chromium, scripted_server

pytestmark = [pytest.mark.browser]

SCREENS = Path("/work/notes/screens")
LINES = """() => [...document.querySelectorAll('#box .line')].map((el) => ({
  text: el.textContent.replace(/\\s+/g, ' ').trim(),
  names: [...el.querySelectorAll('.speaker')].map((s) => s.textContent),
})).filter((l) => l.text)"""


def rename(srv: Any, stream: str, names: dict[str, str]) -> dict[str, Any]:
    req = urllib.request.Request(
        srv.url(f"/streams/{stream}/names"), data=json.dumps(names).encode(), method="POST",
        headers={"Content-Type": "application/json"},
    )  # fmt: skip
    with urllib.request.urlopen(req, timeout=10) as r:
        answer: dict[str, Any] = json.loads(r.read())
        return answer


def keep(shot: Path) -> None:
    """A copy for the notes (where they exist)."""
    if SCREENS.parent.is_dir():
        SCREENS.mkdir(exist_ok=True)
        shutil.copy(shot, SCREENS / shot.name)


def test_the_overlay_and_the_mic_page_relabel_after_a_rename(tmp_path: Path) -> None:
    steps: queue.Queue[dict[str, Any]] = queue.Queue()
    SCRIPTS["names-steps"] = steps
    with scripted_server() as srv, chromium() as browser:
        page = browser.new_page(viewport={"width": 1000, "height": 300})
        mic = browser.new_page(viewport={"width": 900, "height": 700})
        errors: list[str] = []
        for p in (page, mic):
            p.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(srv.url("/overlay?stream=meet&lines=3&size=30&width=900px&hold=0"))
        page.add_style_tag(content=SCENE)
        mic.goto(srv.url("/?stream=meet"))
        seq = 0

        def send(kind: str, segment: int, text: str, speaker: str) -> None:
            nonlocal seq
            steps.put({"type": kind, "segment": segment, "text": text, "speaker": speaker})
            seq += 1
            for p, where in ((page, "box"), (mic, "captions")):
                p.wait_for_function(
                    f"() => Number(document.getElementById('{where}').dataset.lastSeq) >= {seq}",
                    timeout=15_000,
                )

        with LivePublisher(srv, "meet", "names-steps"):
            send("final", 0, "Hello there.", "Speaker 1")
            send("final", 1, "Thanks, good to be here.", "Speaker 2")
            send("partial", 2, "And one more", "Speaker 2")
            before = page.evaluate(LINES)
            assert [ln["text"] for ln in before] == [
                "Speaker 1: Hello there.", "Speaker 2: Thanks, good to be here. And one more",
            ], before  # fmt: skip
            page.screenshot(path=str(tmp_path / "names-before.png"))

            assert rename(srv, "meet", {"Speaker 2": "Mary"})["names"] == {"Speaker 2": "Mary"}
            page.wait_for_function(
                "() => document.getElementById('box').textContent.includes('Mary:')",
                timeout=15_000,
            )
            after = page.evaluate(LINES)
            assert [ln["text"] for ln in after] == [
                "Speaker 1: Hello there.", "Mary: Thanks, good to be here. And one more",
            ], after  # fmt: skip
            assert [ln["names"] for ln in after] == [["Speaker 1:"], ["Mary:"]]
            assert "Speaker 2" not in page.evaluate("document.getElementById('box').textContent")
            mic.wait_for_function(
                "() => document.getElementById('captions').textContent.includes('Mary:')",
                timeout=15_000,
            )
            text = mic.evaluate("document.getElementById('captions').textContent")
            assert "Mary: Thanks" in text and "Speaker 2" not in text, text

            # what comes next is renamed by the server: the partial's final, and a new turn
            send("final", 2, "And one more thing.", "Speaker 2")
            send("final", 3, "Go ahead.", "Speaker 1")
            lines = page.evaluate(LINES)
            shown = " ".join(ln["text"] for ln in lines)
            assert "Mary: Thanks, good to be here. And one more thing." in shown, lines
            assert lines[-1]["text"] == "Speaker 1: Go ahead." and "Speaker 2" not in shown, lines
            page.screenshot(path=str(tmp_path / "names-after.png"))
            mic.screenshot(path=str(tmp_path / "names-mic-page.png"))

            # taken back: the label again, on screen too
            rename(srv, "meet", {"Mary": ""})
            page.wait_for_function(
                "() => document.getElementById('box').textContent.includes('Speaker 2:')",
                timeout=15_000,
            )
            assert "Mary" not in page.evaluate("document.getElementById('box').textContent")
        assert not errors, errors
    for name in ("names-before.png", "names-after.png", "names-mic-page.png"):
        keep(tmp_path / name)
