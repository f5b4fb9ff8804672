"""CEA-608 screens for OBS (`streamcap.core.cea608`): characters, rows, roll-up, finals once,
partials never taken back, and the rate 608 carries. Pure: time is a number here.

The pair counts are what OBS 29.0.2 wrote (cc_count of the SEI of each caption, read from the
received stream: docs/obs.md, "Native captions (CC) in your stream").
"""

from __future__ import annotations

import random

import pytest

from streamcap.core.captions import Caption
from streamcap.core.cea608 import (
    CHARSET,
    ROW_CHARS,
    RollUp608,
    RollUpConfig,
    screen_pairs,
    splits_end_of_caption,
    to_608,
)

JFK = (
    "And so, my fellow Americans, ask not what your country can do for you, "
    "ask what you can do for your country."
)


def final(segment: int, text: str, speaker: str = "") -> Caption:
    return Caption("final", "s", segment, segment, text, 0.0, 1.0, len(text), 0.0, speaker=speaker)


def partial(segment: int, text: str, committed: int) -> Caption:
    return Caption("partial", "s", segment, segment, text, 0.0, 1.0, committed, 0.0)


def drain(r: RollUp608, t: float = 0.0, until: float = 1e9) -> list[tuple[float, str]]:
    """Every screen ``r`` sends from ``t`` on (at the moment it is due), up to ``until``."""
    out: list[tuple[float, str]] = []
    while (wait := r.due(t)) is not None and t + wait <= until:
        t += wait
        screen = r.take(t)
        assert screen is not None
        out.append((t, screen))
    return out


def running_text(screens: list[str]) -> list[str]:
    """The rows a viewer saw, in order, each once: a screen's rows are the tail of the text so
    far, its bottom row maybe grown (the same reading as tests/sinks/test_obs_real.py)."""
    rows: list[str] = []
    for screen in screens:
        for row in screen.split("\n") if screen else ():
            if row in rows[-4:]:
                continue
            if rows and row.startswith(rows[-1]):
                rows[-1] = row
            else:
                rows.append(row)
    return rows


def test_608_characters_are_kept_and_others_brought_near_or_dropped() -> None:
    assert to_608("Café naïve élève Ñandú ß ½ ♪") == "Café naïve élève Ñandú ß ½ ♪"
    assert to_608("don't “so” – ok…") == "don’t “so” - ok..."
    assert to_608("Łódź Őr 5€ æ") == "Lódz Or 5EUR ae"
    assert to_608("Привет 你好 🎉 a") == " a"  # 608 carries Latin script only
    assert to_608("a\tb\n c\u00a0 d") == "a b c d"
    for ch in CHARSET - {"'", "\u00a0"}:
        assert to_608(ch) == ch


@pytest.mark.parametrize(
    ("screen", "pairs"),
    [
        ("HELLO WORLD ONE", 13),
        ("ROW ONE HERE\nROW TWO HERE", 18),
        ("ONE\nTWO\nTHREE", 14),
        ("burst 1", 9),
        ("", 4),
        ("don't it's ’quoted’", 17),  # ASCII "'" is an extended character (two pairs)
        ("not what your country can do for\nyou. Ask what you can do", 31 + 5),
        ("you. Ask what you can do for\nyour country. And Mr. John", 31 + 4),
        ("Dashwood had then leisure to\nconsider how much there", 31 + 3),
        ("consider how much there might be\nprudently in his power to do for", 31 + 9),
    ],
)
def test_screen_pairs_are_what_obs_wrote(screen: str, pairs: int) -> None:
    assert screen_pairs(screen) == pairs


def test_a_screen_whose_end_of_caption_codes_would_be_split_is_known() -> None:
    # OBS wrote it as [erase, resume, rows..., end] [resume, resume, end]: two ends of caption
    assert splits_end_of_caption("Dashwood had then leisure to\nconsider how much there")
    assert not splits_end_of_caption("you. Ask what you can do for\nyour country. And Mr. John")
    assert not splits_end_of_caption("Dashwood had then leisure to")


@pytest.mark.parametrize("rows", [2, 3])
def test_no_screen_is_sent_with_its_end_of_caption_split(rows: int) -> None:
    rng = random.Random(rows)
    vocabulary = [w for w in (JFK + " a I we prudently ill-disposed ½ café naïve").split()]
    r = RollUp608(RollUpConfig(rows=rows, partials=False))
    text = " ".join(rng.choice(vocabulary) for _ in range(3000))
    r.add(final(0, text))
    screens = [s for _, s in drain(r)]
    assert not any(splits_end_of_caption(s) for s in screens)
    assert " ".join(running_text(screens)) == to_608(text)  # and still every word, once


def test_a_final_is_sent_once_in_rows_of_32_without_splitting_a_word() -> None:
    r = RollUp608(RollUpConfig(partials=False))
    r.add(final(0, JFK))
    screens = [s for _, s in drain(r)]
    assert screens[-1] == ""  # erased once nothing new came
    for screen in screens:
        rows = screen.split("\n") if screen else []
        assert len(rows) <= 2 and all(len(row) <= ROW_CHARS for row in rows)
    text = running_text(screens)
    assert " ".join(text) == to_608(JFK)
    assert all(
        len(a) + 1 + len(b.split()[0]) > ROW_CHARS for a, b in zip(text, text[1:], strict=False)
    )


def test_three_rows_and_every_row_is_shown() -> None:
    r = RollUp608(RollUpConfig(rows=3, partials=False))
    long = " ".join([JFK] * 6)
    r.add(final(0, long))
    screens = [s for _, s in drain(r)]
    assert max(len(s.split("\n")) for s in screens) == 3
    assert " ".join(running_text(screens)) == to_608(long)


def test_screens_are_paced_at_the_rate_608_carries() -> None:
    r = RollUp608(RollUpConfig(partials=False))
    long = " ".join([JFK] * 10)  # about 1000 characters at once
    r.add(final(0, long))
    sent = drain(r)
    for (t0, s0), (t1, _) in zip(sent, sent[1:], strict=False):
        assert t1 - t0 >= screen_pairs(s0) / (30000 / 1001) - 1e-9
    chars = sum(len(s) for _, s in sent)
    seconds = sent[-2][0] - sent[0][0]
    assert chars / seconds <= 2 * 30000 / 1001  # at most two characters a pair
    # a screen moves on by at most its rows: every row of the text was on screen
    assert " ".join(running_text([s for _, s in sent])) == to_608(long)


def test_partials_show_locked_words_only_and_the_final_adds_the_rest() -> None:
    r = RollUp608()
    seen: list[str] = []
    t = 0.0
    steps = [
        partial(3, "And so my fellow Americans", 0),
        partial(3, "And so my fellow Americans ask", 12),  # "And so my f": 3 words
        partial(3, "And so my fellow Americans, ask not", 17),  # "fellow" now complete
        partial(3, "And so my fellow Americans, ask not what your", 26),  # "Americans" cut
    ]
    for cap in steps:
        r.add(cap)
        sent = drain(r, t, until=t + 0.5)
        seen += [s for _, s in sent]
        t += 1.0
    assert running_text(seen) == ["And so my fellow"]
    said = JFK.replace("so,", "so")  # what the partials locked comes back unchanged
    r.add(final(3, said))
    seen += [s for _, s in drain(r, t)]
    assert " ".join(running_text(seen)) == to_608(said)  # nothing taken back, nothing twice


def test_a_final_unlike_its_partial_repeats_nothing() -> None:
    r = RollUp608()
    r.add(partial(0, "And so my fellow Americans", 17))
    r.add(final(0, JFK))  # "so," where the partial locked "so" (against the contract)
    text = " ".join(running_text([s for _, s in drain(r)]))
    assert text == to_608(JFK).replace("so,", "so")


def test_finals_only_when_partials_are_off() -> None:
    r = RollUp608(RollUpConfig(partials=False))
    r.add(partial(0, "ask not what", 12))
    assert r.due(0.0) is None
    r.add(final(0, "ask not what your country"))
    assert r.take(0.0) == "ask not what your country"


def test_a_final_split_by_a_change_of_voice_repeats_nothing() -> None:
    r = RollUp608(RollUpConfig(speaker_marks=False))
    r.add(partial(3, "ask not what your country can", 26))  # 5 words locked
    r.add(final(3, "ask not"))
    r.add(final(4, "what your country can do"))
    screens = [s for _, s in drain(r)]
    assert " ".join(running_text(screens)) == "ask not what your country can do"


def test_a_change_of_speaker_starts_a_row_with_the_608_mark() -> None:
    r = RollUp608(RollUpConfig(partials=False))
    r.add(final(0, "Good morning.", speaker="Mary"))
    r.add(final(1, "Thank you.", speaker="Mary"))
    r.add(final(2, "Hello.", speaker="Speaker 2"))
    assert r.take(0.0) == ">> Mary: Good morning. Thank\nyou."
    t = r.due(0.0)
    assert t is not None
    assert r.take(t) == "you.\n>> Speaker 2: Hello."


def test_a_speaker_named_by_the_final_is_not_marked_midway() -> None:
    r = RollUp608()
    r.add(partial(0, "Good morning everyone", 13))  # "Good morning ": no speaker yet
    r.add(final(0, "Good morning everyone.", speaker="Speaker 1"))
    r.add(final(1, "Hello.", speaker="Speaker 2"))
    screens = [s for _, s in drain(r)]
    assert running_text(screens) == ["Good morning everyone.", ">> Speaker 2: Hello."]


def test_an_idle_screen_is_erased_and_the_next_text_starts_afresh() -> None:
    r = RollUp608(RollUpConfig(partials=False, clear_after_s=5.0))
    r.add(final(0, "first words"))
    assert r.take(0.0) == "first words"
    assert r.take(4.9) is None
    assert r.take(5.0) == ""
    assert r.due(5.0) is None  # nothing more to send
    r.add(final(1, "second"))
    assert r.take(9.0) == "second"  # on a fresh row, the erased one not shown again


def test_catch_up_skips_to_the_last_screen() -> None:
    r = RollUp608(RollUpConfig(partials=False))
    r.add(final(0, " ".join([JFK] * 3)))
    first = r.take(0.0)
    assert first is not None and first.startswith("And so")
    r.catch_up()
    t = r.due(0.0)
    assert t is not None
    last = r.take(t)
    assert last == "\n".join(r.text_rows[-2:])
    assert r.due(t) is not None and r.take(t + 0.01) is None  # then only the erase is left


def test_rows_are_checked() -> None:
    with pytest.raises(ValueError):
        RollUpConfig(rows=0)
    with pytest.raises(ValueError):
        RollUpConfig(rows=5)
