"""Issue 37, item 1, the overlay's side: a partial of a labelled stream that the voice labeller
has not named (`speaker` empty while the stream's finals have names) is shown on a fresh line
of its own, without a name, never continued on the previous speaker's line; when its final
comes with a name, the name is shown on that line. Canned events through a real caption
server (`overlaykit`: the decoding replaced by the events the test sends, one at a time) to
the overlay in real headless chromium.
"""

from __future__ import annotations

import queue
from pathlib import Path
from typing import Any

import pytest
from overlaykit import SCENE, SCRIPTS, LivePublisher, chromium, scripted_server

pytestmark = [pytest.mark.browser]

LINES = """() => [...document.querySelectorAll('#box .line')].map((el) => ({
  text: el.textContent.replace(/\\s+/g, ' ').trim(),
  names: [...el.querySelectorAll('.speaker')].map((s) => s.textContent),
  live: el.querySelectorAll('.stable, .partial').length,
}))"""


class Steps:
    """Sends one event at a time through the server and waits until the overlay drew it."""

    def __init__(self, steps: queue.Queue[dict[str, Any]], page: Any) -> None:
        self.steps = steps
        self.page = page
        self.seq = 0

    def send(self, kind: str, segment: int, text: str, speaker: str = "") -> list[dict[str, Any]]:
        self.steps.put({"type": kind, "segment": segment, "text": text, "speaker": speaker})
        self.seq += 1
        self.page.wait_for_function(
            f"() => Number(document.getElementById('box').dataset.lastSeq) >= {self.seq}",
            timeout=15_000,
        )
        lines: list[dict[str, Any]] = self.page.evaluate(LINES)
        return [ln for ln in lines if ln["text"]]


def test_an_unnamed_partial_gets_a_line_of_its_own_and_its_final_the_name(
    tmp_path: Path,
) -> None:
    steps: queue.Queue[dict[str, Any]] = queue.Queue()
    SCRIPTS["speakers-steps"] = steps
    with scripted_server() as srv, chromium() as browser:
        page = browser.new_page(viewport={"width": 1000, "height": 400})
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(srv.url("/overlay?stream=meet&lines=3&size=30&width=900px&hold=0"))
        page.add_style_tag(content=SCENE)
        with LivePublisher(srv, "meet", "speakers-steps"):
            s = Steps(steps, page)
            first = "Speaker 1: Hello there."  # short: there is room after it on its line
            lines = s.send("final", 0, "Hello there.", "Speaker 1")
            assert [ln["text"] for ln in lines] == [first]

            # someone talks; the labeller has not named the voice: a line of its own, no name
            lines = s.send("partial", 1, "Now somebody")
            assert [ln["text"] for ln in lines] == [first, "Now somebody"]
            assert lines[1]["names"] == [] and lines[1]["live"] == 2
            page.screenshot(path=str(tmp_path / "unnamed-partial.png"))
            lines = s.send("partial", 1, "Now somebody else talks")
            assert [ln["text"] for ln in lines] == [first, "Now somebody else talks"]

            # the final names the voice: the name on that line, the words where they were
            second = "Speaker 2: Now somebody else talks."
            lines = s.send("final", 1, "Now somebody else talks.", "Speaker 2")
            assert [ln["text"] for ln in lines] == [first, second]
            assert lines[1]["names"] == ["Speaker 2:"]
            page.screenshot(path=str(tmp_path / "named-final.png"))

            # the same voice again: unnamed first, then named once the labeller knows it (the
            # named partial replaces the unnamed one of its segment), then its final: it
            # stays on its own line throughout, under the name on the line above
            lines = s.send("partial", 2, "And")
            assert [ln["text"] for ln in lines] == [first, second, "And"]
            lines = s.send("partial", 2, "And then more", "Speaker 2")
            assert [ln["text"] for ln in lines] == [first, second, "And then more"]
            lines = s.send("final", 2, "And then more words.", "Speaker 2")
            assert [ln["text"] for ln in lines] == [first, second, "And then more words."]

            # the first voice comes back, unnamed while it is spoken: the lines roll, and its
            # name never goes before words nobody named
            lines = s.send("partial", 3, "Back to")
            assert [ln["text"] for ln in lines] == [second, "And then more words.", "Back to"]
            assert lines[2]["names"] == []
            lines = s.send("final", 3, "Back to the first one.", "Speaker 1")
            assert lines[2]["text"] == "Speaker 1: Back to the first one.", lines
            # a continuation line whose name line rolled away gets the name (it fits)
            lines = s.send("partial", 4, "Yes")
            assert lines[0]["text"] == "Speaker 2: And then more words.", lines
            assert lines[-1] == {"text": "Yes", "names": [], "live": 1}
            page.screenshot(path=str(tmp_path / "named-back.png"))
        assert not errors, errors


def test_a_stream_without_names_continues_its_line(tmp_path: Path) -> None:
    """Without names anywhere (one voice, no labels) a partial follows the final text on its
    line, as before: only a labelled stream gives unnamed words a line of their own."""
    steps: queue.Queue[dict[str, Any]] = queue.Queue()
    SCRIPTS["plain-steps"] = steps
    with scripted_server() as srv, chromium() as browser:
        page = browser.new_page(viewport={"width": 1000, "height": 400})
        page.goto(srv.url("/overlay?stream=plain&lines=2&size=30&width=900px&hold=0"))
        with LivePublisher(srv, "plain", "plain-steps"):
            s = Steps(steps, page)
            assert [ln["text"] for ln in s.send("final", 0, "Hello.")] == ["Hello."]
            assert [ln["text"] for ln in s.send("partial", 1, "world")] == ["Hello. world"]
