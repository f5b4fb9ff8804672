"""A room's subtitle files read in order: cues sorted by when they were said (a room's finals
arrive in the order speech ended), and a speaker's name only where the speaker changes."""

from __future__ import annotations

import io
from pathlib import Path

from streamcap.core.captions import Caption
from streamcap.formats import SrtWriter, render_srt, render_txt, render_vtt

LONG = (
    "So the plan for this week is to move the whole build over to the new cluster. "
    "Then we test every service on it before Friday."
)


def final(seq: int, speaker: str, text: str, start: float, end: float) -> Caption:
    return Caption("final", "room", seq, seq, text, start, end, len(text), 300.0, speaker=speaker)


def room() -> list[Caption]:
    """Emission order: Ben's short turn ended first, inside Ana's long one; then Ana again."""
    return [
        final(1, "Ben", "Sounds good.", 4.1, 5.0),
        final(2, "Ana", LONG, 0.5, 9.0),
        final(3, "Ana", "Any questions?", 9.5, 10.4),
        final(4, "Ben", "None.", 11.0, 11.5),
    ]


def srt_cues(doc: str) -> list[tuple[str, str, str]]:
    """(number, start, text) of each cue."""
    out = []
    for block in doc.strip().split("\n\n"):
        num, times, *text = block.split("\n")
        out.append((num, times.split(" --> ")[0], "\n".join(text)))
    return out


def test_room_srt_is_in_time_order_with_names_on_change_only() -> None:
    cues = srt_cues(render_srt(room()))
    assert [n for n, _, _ in cues] == [str(i) for i in range(1, len(cues) + 1)]
    starts = [t for _, t, _ in cues]
    assert starts == sorted(starts), starts
    texts = [t for _, _, t in cues]
    # Ana's long final is several cues; Ben's turn falls between two of them.
    assert texts[0].startswith("Ana: So the plan")
    ben = next(i for i, t in enumerate(texts) if "Sounds good." in t)
    assert 0 < ben < len(texts) - 2 and texts[ben] == "Ben: Sounds good."
    assert texts[ben + 1].startswith("Ana: ")  # back to Ana: named again
    # Every other cue is a continuation of the previous cue's speaker: no name.
    named = [t.split(":")[0] for t in texts if t.startswith(("Ana: ", "Ben: "))]
    assert named == ["Ana", "Ben", "Ana", "Ben"], texts
    assert texts[-1] == "Ben: None."
    assert sum("Any questions?" in t for t in texts) == 1
    assert not any(t.startswith("Ana: Any questions?") for t in texts)  # Ana still talking


def test_equal_starts_keep_their_order_and_partials_are_left_out() -> None:
    a = final(1, "Ana", "First.", 1.0, 2.0)
    b = final(2, "Ben", "Second.", 1.0, 2.0)
    partial = Caption("partial", "room", 3, 3, "never", 0.0, 1.0, 0, 1.0, speaker="Cy")
    assert [t for _, _, t in srt_cues(render_srt([partial, a, b]))] == [
        "Ana: First.",
        "Ben: Second.",
    ]
    assert render_txt([b, a]) == "Ben: Second.\nAna: First.\n"


def test_room_vtt_sorted_with_a_voice_span_on_every_cue() -> None:
    doc = render_vtt(room())
    assert doc.startswith("WEBVTT\n\n")
    blocks = doc[len("WEBVTT\n\n") :].strip().split("\n\n")
    starts = [b.split(" --> ")[0] for b in blocks]
    assert starts == sorted(starts)
    assert all(b.split("\n", 1)[1].startswith(("<v Ana>", "<v Ben>")) for b in blocks), blocks


def test_room_txt_in_start_order_names_on_change() -> None:
    lines = render_txt(room()).splitlines()
    assert lines == [f"Ana: {LONG}", "Ben: Sounds good.", "Ana: Any questions?", "Ben: None."]
    same = [final(1, "Ana", "One.", 0, 1), final(2, "Ana", "Two.", 1, 2), final(3, "", "x", 2, 3)]
    assert render_txt(same).splitlines() == ["Ana: One.", "Two.", "x"]


def test_appending_srt_writer_names_a_speaker_once_per_turn() -> None:
    buf = io.StringIO()
    w = SrtWriter(buf)
    w.write_all([final(1, "Ana", "One.", 0, 1), final(2, "Ana", "Two.", 1, 2)])
    w.write(final(3, "Ben", "Three.", 2, 3))
    assert [t for _, _, t in srt_cues(buf.getvalue())] == ["Ana: One.", "Two.", "Ben: Three."]


# --------------------------------------------------------------------------- the overlay


class EventServer:
    """The overlay's page and script from web/ (the server's own static route) and a
    /captions WebSocket on loopback that sends every event of `events` (replayed whole to each
    new viewer, then live as the test appends), like the caption server's replay."""

    def __init__(self) -> None:
        import threading

        from websockets.sync.server import serve

        from streamcap.server.routes import default_web_dir, static_file

        self.events: list[dict[str, object]] = []
        self.stopped = threading.Event()
        web = default_web_dir()

        def http(connection: object, request: object) -> object:
            path = getattr(request, "path", "").split("?")[0]
            if path == "/captions":
                return None
            if path == "/overlay":
                return static_file(web, "overlay.html")
            return static_file(web, path.removeprefix("/static/"))

        def viewer(ws: object) -> None:
            import json
            import time

            sent = 0
            try:
                while not self.stopped.is_set():
                    while sent < len(self.events):
                        ws.send(json.dumps(self.events[sent]))  # type: ignore[attr-defined]
                        sent += 1
                    time.sleep(0.02)
            except Exception:  # noqa: BLE001 - the page went away
                return

        self.server = serve(viewer, "127.0.0.1", 0, process_request=http)  # type: ignore[arg-type]
        self.port = self.server.socket.getsockname()[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def add(self, kind: str, speaker: str, segment: int, text: str, **extra: object) -> None:
        ev: dict[str, object] = {
            "type": kind, "stream": "room", "seq": len(self.events) + 1, "epoch": "e1",
            "segment": segment, "text": text, "start": 0.0, "end": 1.0,
            "committed_chars": len(text) if kind == "final" else 0, "latency_ms": 400.0,
            "speaker": speaker,
        }  # fmt: skip
        ev.update(extra)
        self.events.append(ev)

    def close(self) -> None:
        self.stopped.set()
        self.server.shutdown()
        self.thread.join(5)


def _visible_lines(page: object) -> list[str]:
    return page.locator("#box .line").evaluate_all(  # type: ignore[attr-defined]
        "els => els.map(e => e.textContent.replace(/\\s+/g, ' ').trim())"
    )


def test_overlay_keeps_both_speakers_lines_and_names(tmp_path: Path) -> None:
    """Ana's final wraps past the two-line window while Ben talks: the overlay still shows
    Ana's last line with her name above Ben's partial; Ben's long partial never pushes Ana's
    open line away; a viewer joining now (replay) sees the names too; hold counts from the
    final's speech."""
    from browserkit import browser as launch_browser
    from browserkit import need_chromium

    sync_api = need_chromium()
    expect = sync_api.expect

    srv = EventServer()
    try:
        with sync_api.sync_playwright() as pw:
            browser = launch_browser(pw)
            try:
                errors: list[str] = []
                page = browser.new_page(viewport={"width": 1000, "height": 400})
                page.on("pageerror", lambda e: errors.append(str(e)))
                q = "/overlay?stream=room&lines=2&size=30&width=600px&bg=000000aa"
                page.goto(srv.url(q))
                assert page.evaluate("window.streamcapOverlay.cfg.hold") == 6  # the default

                # Both talk at once.
                srv.add("partial", "Ana", 1, "So the plan for this week")
                srv.add("partial", "Ben", 2, "Sounds good")
                box = page.locator("#box")
                expect(box.locator(".line").nth(1)).to_have_text("Ben: Sounds good", timeout=15_000)
                assert _visible_lines(page)[0] == "Ana: So the plan for this week"

                # Ana's long final replaces her partial and wraps past the window; Ben's
                # partial is still open: Ana's last line keeps her name.
                srv.add("final", "Ana", 1, "So the plan for this week is to move the whole "
                        "build over to the new cluster.")  # fmt: skip
                expect(box).to_contain_text("cluster.", timeout=15_000)
                expect(box.locator(".speaker")).to_have_text(["Ana:", "Ben:"])
                lines = _visible_lines(page)
                assert len(lines) == 2 and lines[0].startswith("Ana: ") and "cluster." in lines[0]
                assert "So the plan" not in lines[0]  # a continuation line, named on screen
                assert lines[1] == "Ben: Sounds good", lines
                shot = tmp_path / "room-views.png"
                page.screenshot(path=str(shot), omit_background=True)
                assert shot.stat().st_size > 1000

                # A viewer who joins now gets the replay and sees both names.
                late = browser.new_page(viewport={"width": 1000, "height": 400})
                late.on("pageerror", lambda e: errors.append(f"late: {e}"))
                late.goto(srv.url(q))
                expect(late.locator("#box .speaker")).to_have_text(["Ana:", "Ben:"],
                                                                   timeout=15_000)  # fmt: skip
                assert _visible_lines(late) == lines
                late.screenshot(path=str(tmp_path / "room-views-late.png"), omit_background=True)

                # Ana talks again while Ben's partial grows to two lines: her open line
                # stays on screen until her final replaces it.
                srv.add("partial", "Ana", 3, "Any questions")
                srv.add("partial", "Ben", 2, "Sounds good to me and I think we should also "
                        "move the staging servers over")  # fmt: skip
                expect(box).to_contain_text("staging", timeout=15_000)
                lines = _visible_lines(page)
                assert lines[0] == "Ana: Any questions", lines
                assert lines[1].startswith("Ben:") and "staging" in lines[1], lines

                # hold: nothing clears while a partial is open; after the last final the box
                # clears hold seconds after its speech ended (arrival minus latency_ms).
                fast = browser.new_page(viewport={"width": 1000, "height": 400})
                fast.goto(srv.url(q + "&hold=1.5"))
                expect(fast.locator("#box")).to_contain_text("staging", timeout=15_000)
                srv.add("final", "Ben", 2, "Sounds good to me and I think we should also "
                        "move the staging servers over.", latency_ms=1000.0)  # fmt: skip
                expect(fast.locator("#box")).to_contain_text("servers over.", timeout=15_000)
                fast.wait_for_timeout(2500)  # Ana's partial is still open
                assert fast.evaluate("document.getElementById('box').style.opacity") != "0"
                srv.add("final", "Ana", 3, "Any questions?", latency_ms=1000.0)
                expect(fast.locator("#box")).to_contain_text("Any questions?", timeout=15_000)
                expect(fast.locator("#box")).to_have_css("opacity", "0", timeout=3_000)
                keep = browser.new_page()
                keep.goto(srv.url(q + "&hold=0"))
                expect(keep.locator("#box")).to_contain_text("Any questions?", timeout=15_000)
                assert keep.evaluate("window.streamcapOverlay.cfg.hold") == 0
                keep.wait_for_timeout(1000)
                assert keep.evaluate("document.getElementById('box').style.opacity") != "0"
                assert not errors, errors
            finally:
                browser.close()
    finally:
        srv.close()
