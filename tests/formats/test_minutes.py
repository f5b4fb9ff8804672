"""Issue 37, item 3: the transcripts people read, as files. Minutes (``.md``: a heading, the
participants, ``**Ana** (00:03:12): ...`` per turn) and the plain transcript (``.txt``:
openai-whisper's plain form, "Name: " where the speaker changes). Pure: captions made by hand,
the Markdown read back by a real CommonMark parser (markdown-it-py, what `rich` renders with).
"""

from __future__ import annotations

import io
import math
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from streamcap.core.captions import Caption
from streamcap.formats.minutes import (
    PARAGRAPH_PAUSE_S,
    Minutes,
    MinutesWriter,
    clock_time,
    md_escape,
    render_minutes,
)
from streamcap.formats.registry import format_of, live_formats, open_writer
from streamcap.formats.text import render_txt


def final(seq: int, speaker: str, text: str, start: float, end: float) -> Caption:
    return Caption(
        "final", "standup", seq, seq, text, start, end, len(text), 300.0, speaker=speaker
    )


def meeting() -> list[Caption]:
    return [
        final(1, "Ana", "Good morning, everyone.", 1.2, 2.8),
        final(2, "Ana", "Let's start with the build.", 3.1, 5.0),
        final(3, "Ben", "The build is green again.", 6.0, 8.5),
        final(4, "Speaker 3", "I have one question.", 192.4, 194.0),
        final(5, "Ana", "Go ahead.", 195.0, 195.9),
        final(6, "Ana", "", 196.0, 196.5),  # an empty final: nothing to write
    ]


MINUTES = """\
# Minutes: standup

Date: 2026-12-05

## Participants

- Ana
- Ben
- Speaker 3

## Transcript

**Ana** (00:00:01): Good morning, everyone. Let's start with the build.

**Ben** (00:00:06): The build is green again.

**Speaker 3** (00:03:12): I have one question.

**Ana** (00:03:15): Go ahead.
"""


def test_minutes_are_turns_with_names_and_times() -> None:
    assert render_minutes(meeting(), title="standup", date="2026-12-05") == MINUTES


def test_a_rooms_finals_are_read_in_the_order_they_were_said() -> None:
    """A room's finals arrive in the order speech ended: Ben's remark, made during Ana's long
    turn, arrives first but comes after its start."""
    ana = final(2, "Ana", "So the plan for this week is to move the build.", 0.5, 9.0)
    ben = final(1, "Ben", "Sounds good.", 4.1, 5.0)
    doc = render_minutes([ben, ana], title="room")
    body = doc.split("## Transcript\n", 1)[1]
    assert body == (
        "\n**Ana** (00:00:00): So the plan for this week is to move the build.\n"
        "\n**Ben** (00:00:04): Sounds good.\n"
    )


def test_unnamed_speech_breaks_into_paragraphs_at_pauses() -> None:
    """No names: no turns; a paragraph per stretch of speech, led by its time."""
    gap = PARAGRAPH_PAUSE_S
    caps = [
        final(1, "", "And so my fellow Americans,", 0.3, 2.7),
        final(2, "", "ask not what your country can do for you.", 2.9, 6.0),
        final(3, "", "Ask what you can do for your country.", 6.0 + gap + 0.5, 12.0 + gap),
    ]
    doc = render_minutes(caps, title="jfk.wav", date="2026-12-05")
    assert "## Participants" not in doc
    assert doc.endswith(
        "## Transcript\n\n(00:00:00) And so my fellow Americans, ask not what your country can "
        "do for you.\n\n(00:00:10) Ask what you can do for your country.\n"
    )


def _html(doc: str) -> str:
    return MarkdownIt("commonmark").render(doc)


def test_markdown_in_what_was_said_is_shown_as_said() -> None:
    """Text and names are model output or typed by a participant: nothing in them becomes
    emphasis, a link, a heading, a list or HTML when the minutes are rendered."""
    said = "Use *stars*, _under_ [a link](http://x) <b>bold</b> & `code` ~~gone~~ \\ # not"
    names = ["# Boss", "1. Cy", "- Dee", "Ed*"]
    caps = [final(i + 1, who, said, 10.0 * i, 10.0 * i + 5) for i, who in enumerate(names)]
    html = _html(render_minutes(caps, title="a *b* <c>"))
    for tag in ("<em>", "<a ", "<b>", "<code>", "<ol", "<h2>#", "<s>", "<del>"):
        assert tag not in html, (tag, html)
    assert html.count("<h1>") == 1 and html.count("<h2>") == 2  # ours only
    assert html.count("<li>") == len(names)  # one list: the participants
    text = said.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    assert html.count(text) == len(names), html
    for who in names:
        assert f"<strong>{who}</strong>" in html and f"<li>{who}</li>" in html
    assert "<h1>Minutes: a *b* &lt;c&gt;</h1>" in html


def test_whitespace_and_escaping_keep_one_line_per_paragraph() -> None:
    assert md_escape("two\n\nlines\t here ") == "two lines here"
    doc = render_minutes([final(1, "Ana", "one\n\n# two", 0, 1)], title="t")
    assert doc.rstrip("\n").split("\n")[-1] == "**Ana** (00:00:00): one # two"


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [(0, "00:00:00"), (59.9994, "00:00:59"), (3599.9996, "01:00:00"), (192.4, "00:03:12"),
     (-3, "00:00:00"), (math.nan, "00:00:00"), (400000, "111:06:40")],
)  # fmt: skip
def test_clock_time(seconds: float, shown: str) -> None:
    assert clock_time(seconds) == shown


def test_minutes_say_what_changed() -> None:
    m = Minutes("t", "d")
    changes = [m.add(c) for c in meeting()]
    assert changes == ["participant", "more", "participant", "participant", "turn", ""]
    assert m.add(Caption("partial", "s", 9, 9, "not yet", 1, 2, 0, 1.0, speaker="Zed")) == ""
    assert m.participants == ["Ana", "Ben", "Speaker 3"]


def test_the_writer_keeps_a_valid_file_after_every_final(tmp_path: Path) -> None:
    """A real file (text mode: positions are `tell()` cookies), non-ASCII text, a turn that
    grows, a new turn, a new participant (the list at the top changes): after each final the
    file is exactly the minutes of the finals so far."""
    caps = [
        final(1, "Zoë", "Bonjour à tous, ça va ?", 0.0, 2.0),
        final(2, "Zoë", "我们开始吧。", 2.2, 3.0),
        final(3, "Ben", "Ok — let's go.", 4.0, 5.0),
        final(4, "Zoë", "Très bien.", 6.0, 7.0),
        final(5, "Zoë", "Merci.", 7.1, 8.0),
        final(6, "Ana", "Late, sorry!", 9.0, 10.0),
        final(7, "Ben", "No problem.", 11.0, 12.0),
    ]
    path = tmp_path / "standup.md"
    with MinutesWriter(path, date="2026-12-05") as w:
        assert path.read_text(encoding="utf-8") == render_minutes(
            [], title="standup", date="2026-12-05"
        )
        for k, c in enumerate(caps, 1):
            w.write(c)
            assert path.read_text(encoding="utf-8") == render_minutes(
                caps[:k], title="standup", date="2026-12-05"
            ), k


class Pipe(io.StringIO):
    """A target that cannot seek (a pipe)."""

    def seekable(self) -> bool:
        return False

    def close(self) -> None:  # keep the text readable after the writer closes it
        pass


def test_a_target_that_cannot_seek_gets_the_whole_minutes_at_close() -> None:
    pipe = Pipe()
    w = MinutesWriter(pipe, title="standup", date="2026-12-05")
    w.write_all(meeting())
    assert pipe.getvalue() == ""
    w.close()
    assert pipe.getvalue() == MINUTES


def test_md_is_a_registered_format_written_as_captions_come(tmp_path: Path) -> None:
    assert format_of("minutes.MD") == "md" and "md" in live_formats()
    with open_writer(tmp_path / "x.md", title="talk.mp4", date="2026-01-02") as w:
        w.write_all(meeting())
    doc = (tmp_path / "x.md").read_text(encoding="utf-8")
    assert doc.startswith("# Minutes: talk.mp4\n\nDate: 2026-01-02\n")
    assert doc.endswith("**Ana** (00:03:15): Go ahead.\n")
    with open_writer(tmp_path / "standup.md") as w:  # the file's name; today
        pass
    assert (tmp_path / "standup.md").read_text(encoding="utf-8").startswith("# Minutes: standup\n")


def test_txt_is_whispers_plain_form_with_names_where_the_speaker_changes() -> None:
    """openai-whisper's WriteTXT: each segment's text, stripped, one per line; streamcap puts
    "Name: " before a line whose speaker is not the previous line's."""
    plain = [final(1, "", " And so my fellow Americans, ", 0, 1), final(2, "", "ask not.", 1, 2)]
    assert render_txt(plain) == "And so my fellow Americans,\nask not.\n"
    assert render_txt(meeting()).splitlines() == [
        "Ana: Good morning, everyone.",
        "Let's start with the build.",
        "Ben: The build is green again.",
        "Speaker 3: I have one question.",
        "Ana: Go ahead.",
    ]
