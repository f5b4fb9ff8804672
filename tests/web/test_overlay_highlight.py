"""Issue 37, item 6: `highlight=words` lights the word being said, not a replay of the final.

A real caption server on loopback plays timed partials and finals (`overlaykit`: the decoding
replaced by a script whose words have known times, emitted as the publisher's audio reaches
them, with the latency a real run has), and overlays in real headless chromium are polled every
50 ms: the lit word must be the newest word on screen as each partial arrives, carried on to the
final's words, never lit before it is said and never stepping back; it goes out after the
speaker's last final. With `partial=hidden` the final is read along as before. The timing logic
itself (`web/highlight.js`) is checked on its own in the same browser.
"""

from __future__ import annotations

import asyncio
import math
import shutil
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from overlaykit import SCENE, SCRIPTS, chromium, scripted_server

from streamcap.evaluation.highlight_metrics import Poll, summarize
from streamcap.evaluation.reference_words import RefWord
from streamcap.server.client import publish, ws_url

pytestmark = [pytest.mark.browser]

SHOTS = Path("/work/notes/screens")
FRAME_S = 0.1
# Two sentences, each word with the time it is said (stream seconds).
SAID = [
    [("Ask", 0.50, 0.75), ("not", 0.80, 1.05), ("what", 1.10, 1.35), ("your", 1.40, 1.65),
     ("country", 1.70, 2.15), ("can", 2.20, 2.45), ("do", 2.50, 2.75), ("for", 2.80, 2.95),
     ("you.", 3.00, 3.40)],
    [("My", 5.00, 5.20), ("fellow", 5.25, 5.60), ("citizens", 5.65, 6.20), ("of", 6.30, 6.40),
     ("the", 6.45, 6.55), ("world.", 6.60, 7.10)],
]  # fmt: skip
# (emitted at, audio end, sentence, words shown): a partial shows what it heard less its last
# two words (the server's holdback); the final, all of them with their times.
EVENTS = [(1.35, 1.2, 0, 1), (2.35, 2.2, 0, 4), (3.05, 2.9, 0, 6), (3.75, 3.4, 0, 9),
          (6.05, 5.9, 1, 1), (6.75, 6.6, 1, 4), (7.50, 7.1, 1, 6)]  # fmt: skip
RUN_S = 10.5
LINGER_S = 1.5  # overlay.html's LINGER_MS

LIT = "() => [...document.querySelectorAll('#box .now')].some((e) => e.textContent === 'WORD')"
POLL = """() => {
  window.litLog = [];
  setInterval(() => {
    const lit = [...document.querySelectorAll('#box .now')].map((el) => ({
      word: el.textContent, start: Number(el.dataset.start), cls: el.className }));
    window.litLog.push({ t: performance.timeOrigin + performance.now(), lit });
  }, 50);
}"""


def _script() -> list[dict[str, Any]]:
    out = []
    for at, end, s, n in EVENTS:
        words = SAID[s][:n]
        final = n == len(SAID[s])
        out.append(
            {
                "at": at, "type": "final" if final else "partial", "segment": s + 1,
                "text": " ".join(w for w, _, _ in words), "start": SAID[s][0][1], "end": end,
                "latency_ms": round((at - end) * 1000), "words": words if final else (),
            }
        )  # fmt: skip
    return out


def _publish(srv: Any, stream: str, script: str, started: list[float]) -> threading.Thread:
    """Silence at real-time pace playing `script`; `started`: the epoch time of frame 0."""
    url = ws_url(srv.url("", websocket=True), "ingest", stream)
    audio = np.zeros(int(RUN_S * 16000), np.float32)

    def on_frame(_: float) -> None:
        if not started:
            started.append(time.time())

    t = threading.Thread(
        target=lambda: asyncio.run(
            publish(url, audio, 16000, frame_s=FRAME_S, on_frame=on_frame,
                    start_fields={"prompt": script})
        ),
        daemon=True,
    )  # fmt: skip
    t.start()
    return t


def _when(text: str) -> tuple[int, float]:
    """(sentence, the time it is said) of a word of `SAID` (each word is said once)."""
    for s, words in enumerate(SAID):
        for w, a, _ in words:
            if w == text:
                return s, a
    raise AssertionError(f"{text!r} was never said")


def _polls(polls: list[tuple[float, list[dict[str, Any]]]]) -> list[Poll]:
    return [Poll(t, lit[0]["word"], lit[0]["start"]) if lit else Poll(t) for t, lit in polls]


def _script_bound() -> float:
    """The most a newest-word highlight can lag in `EVENTS`: until the next event is drawn
    (0.25 s), the voice has been past the newest word shown since the next word began."""
    worst = 0.0
    for (_, _, s, n), (at, _, s2, _) in zip(EVENTS, EVENTS[1:], strict=False):
        following = SAID[s][n][1] if n < len(SAID[s]) else SAID[s2][0][1]
        worst = max(worst, at + 0.25 - following)
    return worst


def test_the_lit_word_follows_the_voice(tmp_path: Path) -> None:
    SCRIPTS["highlight-voice"] = _script()
    with scripted_server(1.0) as srv, chromium() as browser:
        pages = {}
        for name, extra in (("live", ""), ("hidden", "&partial=hidden")):
            page = browser.new_page(viewport={"width": 1280, "height": 400})
            errors: list[str] = []
            page.on("pageerror", lambda e, errors=errors: errors.append(str(e)))
            page.goto(srv.url(f"/overlay?stream=hl&highlight=words&hold=0&lines=2&size=40{extra}"))
            page.add_style_tag(content=SCENE)
            page.evaluate(POLL)
            pages[name] = (page, errors)
        started: list[float] = []
        sender = _publish(srv, "hl", "highlight-voice", started)
        live = pages["live"][0]
        # mid-sentence: the second partial's newest word is lit, dimmed words after nothing
        live.wait_for_function(LIT.replace("WORD", "your"), timeout=15_000)
        shot = tmp_path / "overlay-highlight-partial.png"
        live.screenshot(path=str(shot), clip={"x": 0, "y": 200, "width": 1280, "height": 200})
        # the final replaced the partial: the light went on to its last word
        live.wait_for_function(LIT.replace("WORD", "you."), timeout=15_000)
        carried = tmp_path / "overlay-highlight-carried.png"
        live.screenshot(path=str(carried), clip={"x": 0, "y": 200, "width": 1280, "height": 200})
        sender.join(RUN_S + 30)
        time.sleep(LINGER_S + 1.0)
        logs = {name: page.evaluate("window.litLog") for name, (page, _) in pages.items()}
        for name, (_, errors) in pages.items():
            assert not errors, (name, errors)
        final_shot = tmp_path / "overlay-highlight-final.png"
        live.screenshot(path=str(final_shot), clip={"x": 0, "y": 200, "width": 1280, "height": 200})
    SHOTS.mkdir(parents=True, exist_ok=True)
    for s in (shot, carried, final_shot):
        shutil.copyfile(s, SHOTS / s.name)
    zero = started[0] - FRAME_S  # the server's stream time 0 (epoch s)
    polls = [(p["t"] / 1000 - zero, p["lit"]) for p in logs["live"]]

    last_start = {0: -1.0, 1: -1.0}
    for t, lit in polls:
        assert len(lit) <= 1, (t, lit)  # one voice: one lit word
        arrived = [e for e in _script() if e["at"] + 0.25 <= t]
        coming = [e["at"] for e in _script() if e["at"] > t - 0.25]
        if lit:
            s, said = _when(lit[0]["word"])
            assert said <= t + 0.1, (t, lit)  # never lit before it is said
            assert said >= last_start[s], (t, lit)  # never back: partial -> final carried on
            last_start[s] = said
        if arrived and (not coming or t < coming[0]) and t < arrived[-1]["at"] + LINGER_S:
            # once an event is drawn, its newest word is the lit one (a partial's or the final's)
            # until the next one comes
            newest = arrived[-1]["text"].split()[-1]
            assert lit and lit[0]["word"] == newest, (t, lit, newest)
            assert ("partial" in lit[0]["cls"] or "stable" in lit[0]["cls"]) == (
                arrived[-1]["type"] == "partial"
            ), (t, lit)
    # after each sentence's final the light stays a moment, then goes out until words come
    first_final, second_partial = EVENTS[3][0], EVENTS[4][0]
    gap = [lit for t, lit in polls if first_final + LINGER_S + 0.4 < t < second_partial - 0.1]
    assert gap and not any(gap), gap
    end = [lit for t, lit in polls if t > EVENTS[-1][0] + LINGER_S + 0.4]
    assert end and not any(end), end

    # how far behind the voice, as `highlight_lag` measures it: no further than the script's
    # partials allow (the voice runs on until the next event shows newer words), and far
    # closer than the read-along of finals that partial=hidden keeps (the overlay before)
    ref = [RefWord(w, a, b, s) for s, words in enumerate(SAID) for w, a, b in words]
    scored = summarize(ref, _polls(polls))
    hidden = [(p["t"] / 1000 - zero, p["lit"]) for p in logs["hidden"]]
    finals_only = summarize(ref, _polls(hidden))
    print(
        f"lag p50/p95: live {scored['lag_p50_s']:.2f}/{scored['lag_p95_s']:.2f} s, finals "
        f"read along {finals_only['lag_p50_s']:.2f}/{finals_only['lag_p95_s']:.2f} s"
    )
    assert scored["unmatched"] == 0 and scored["early"] == 0
    assert scored["lag_max_s"] <= _script_bound() + 0.2, scored
    assert finals_only["lag_p50_s"] > scored["lag_p50_s"] + 1.0, (scored, finals_only)

    # partial=hidden: the words come with the final only, which is read along at its pace
    order = []
    for t, lit in hidden:
        if lit and (not order or order[-1][1] != lit[0]["word"]):
            order.append((t, lit[0]["word"]))
    words = [w for _, w in order]
    assert words == [w for w, _, _ in SAID[0]] + [w for w, _, _ in SAID[1]], words
    assert order[0][0] >= EVENTS[3][0], order  # nothing before its final arrived
    paced = order[len(SAID[0]) - 1][0] - order[0][0]  # the first sentence, at its spoken pace
    assert 0.8 * 2.5 < paced < 1.5 * 2.5, order


LOGIC = """() => {
  const S = window.Streamcap;
  const out = {};
  out.est = S.estimateTimes("Ask not country", 10, 16, 2);
  out.estFinal = S.estimateTimes("a bb", 1, 2, 0);
  out.bad = [S.estimateTimes("", 0, 1), S.estimateTimes("a", 0, NaN)];
  const words = [{ start: 1, who: "" }, { start: 2, who: "Ben" }, { start: 3, who: "" },
                 { start: 5, who: "" }, { start: 4, who: "Ben" }];
  out.lit = [...S.litWords(words, (who) => (who === "Ben" ? 4 : 3.5)).entries()];
  out.none = [...S.litWords(words, () => 0.5).entries()];
  const v = new S.VoiceClock();
  out.before = v.at("", 1000);
  v.observe("", { end: 2, latency_ms: 500 }, 10000);   // zero at 7500 ms
  v.observe("", { end: 3, latency_ms: 900 }, 11400);   // zero at 7500 ms: kept
  v.observe("", { end: 4, latency_ms: 300 }, 12000);   // 7700: later, the earlier one stays
  out.at = v.at("", 9500);
  v.observe("", { end: 5, latency_ms: 100 }, 12300);   // 7200: an earlier zero wins
  out.at2 = v.at("", 9200);
  out.wall = v.wall("", 2);
  out.other = v.at("Ben", 9200);                        // not seen yet: the latest zero
  v.observe("", { end: "x" }, 1);                       // ignored
  v.clear();
  out.cleared = v.at("", 9200);
  return out;
}"""


def test_highlight_timing_logic() -> None:
    """`web/highlight.js` on its own (pure functions, in the page that loads them)."""
    with scripted_server(1.0) as srv, chromium() as browser:
        page = browser.new_page()
        page.goto(srv.url("/overlay?stream=nobody&highlight=words"))
        r = page.evaluate(LOGIC)
    # letters + a space each, two average words' worth held back at the end
    est = r["est"]
    assert est[0][0] == 10 and all(a[1] == b[0] for a, b in zip(est, est[1:], strict=False))
    per = 6 / (4 + 4 + 8 + 2 * (16 / 3))
    assert [b - a for a, b in est] == pytest.approx([4 * per, 4 * per, 8 * per])
    assert est[-1][1] == pytest.approx(16 - 2 * (16 / 3) * per)
    assert sum(r["estFinal"], []) == pytest.approx([1, 1.4, 1.4, 2])  # a final: none held back
    assert r["bad"] == [None, None]
    # per speaker, the last word (in screen order) whose time has come
    assert sorted(r["lit"]) == [["", 2], ["Ben", 4]] and r["none"] == []
    assert r["before"] == -math.inf  # before any event
    assert r["at"] == 2.0  # (9500 - 7500) / 1000
    assert r["at2"] == 2.0 and r["wall"] == 7200 + 2000 and r["other"] == 2.0
    assert r["cleared"] == -math.inf


# (emitted at, audio end, words shown, words tentative): what the server sends with its
# `tentative_holdback_words` (1): a partial shows what it heard less two words and what the
# previous partial did not agree on, and carries the rest less the last word as `tentative`.
TENTATIVE = [(1.35, 1.2, 1, 1), (2.35, 2.2, 3, 2)]  # the last stays on screen
SHOWN_TEXT = "() => document.getElementById('box').textContent.replace(/\\s+/g, ' ').trim()"


def test_tentative_words_light_up_in_the_word_highlight_only(tmp_path: Path) -> None:
    """A partial's `tentative` words (heard, not shown yet) are drawn, fainter, and lit as the
    voice reaches them by `highlight=words`, and by no other overlay: there the text keeps
    the server's holdback."""
    said = SAID[0]
    script = []
    for at, end, n, m in TENTATIVE:
        script.append({
            "at": at, "type": "partial", "segment": 1, "start": said[0][1], "end": end,
            "latency_ms": round((at - end) * 1000), "text": " ".join(w for w, _, _ in said[:n]),
            "tentative": " ".join(w for w, _, _ in said[n : n + m]),
        })  # fmt: skip
    SCRIPTS["highlight-tentative"] = script
    with scripted_server(1.0) as srv, chromium() as browser:
        pages = {}
        for name, extra in (("words", "&highlight=words"), ("plain", "")):
            page = browser.new_page(viewport={"width": 1280, "height": 400})
            page.goto(srv.url(f"/overlay?stream=tent&hold=0&lines=2&size=40{extra}"))
            page.add_style_tag(content=SCENE)
            pages[name] = page
        sender = _publish(srv, "tent", "highlight-tentative", [])
        words = pages["words"]
        # the second partial: "Ask not what" shown, "your country" tentative, the newest lit
        words.wait_for_function(LIT.replace("WORD", "country"), timeout=15_000)
        lit = words.evaluate(
            "() => [...document.querySelectorAll('#box .now')].map((e) => e.className)"
        )
        shot = tmp_path / "overlay-highlight-tentative.png"
        words.screenshot(path=str(shot), clip={"x": 0, "y": 200, "width": 1280, "height": 200})
        faint = words.evaluate(
            """() => [...document.querySelectorAll('#box .tentative')].map((e) =>
                 [e.textContent, getComputedStyle(e).opacity])"""
        )
        shown = {name: page.evaluate(SHOWN_TEXT) for name, page in pages.items()}
        sender.join(RUN_S + 30)
    SHOTS.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(shot, SHOTS / shot.name)
    assert lit == ["partial dimmed tentative now"], lit
    assert shown["words"] == "Ask not what your country", shown
    assert shown["plain"] == "Ask not what", shown  # the same partial, without its tentative words
    assert faint == [["your", "0.45"], ["country", "1"]], faint  # the lit one at full strength
