"""The cross-talk rule of a room (`core.crosstalk`), on canned captions: no model, no server.

Each microphone of a room hears the other participants more quietly. A caption that another
publisher's microphone heard markedly louder, at the same time, with the same words, is a copy
and is left out; two people really talking at once are both kept; a caption waits for evidence
only when it could be a copy, and never longer than `hold_s`.
"""

from __future__ import annotations

import numpy as np
import pytest

from streamcap.core.crosstalk import CrossTalk, CrossTalkConfig, Heard, Released
from streamcap.core.crosstalk_measures import similarity, speech_level_db

SR = 16000
JFK = "And so my fellow Americans, ask not what your country can do for you."
SENTENCES = [
    JFK,
    "Feels like these days go on forever.",
    "Go forward 10 meters.",
    "He was not an ill-disposed young man.",
    "Mary rolled the barrel.",
    "Let's take the last five minutes for questions from the audience.",
    "And Mr. John Dashwood had then leisure to consider how much there might be prudently in "
    "his power to do for them.",
    "Ask what you can do for your country.",
]


def heard(who: str, text: str, start: float, end: float, db: float | None, kind: str = "final",
          segment: int = 0) -> Heard:  # fmt: skip
    return Heard(who, kind, segment, text, start, end, db)  # type: ignore[arg-type]


def shown(out: list[Released[str]]) -> list[str]:
    return [r.payload for r in out if r.verdict == "show"]


# --------------------------------------------------------------------------- the measures


def test_speech_level_follows_the_gain_not_the_pauses() -> None:
    rng = np.random.default_rng(1)
    voice = (0.1 * rng.standard_normal(SR)).astype(np.float32)
    loud = speech_level_db(voice)
    assert loud is not None and loud == pytest.approx(-20.0, abs=0.5)
    quiet = speech_level_db(voice * 10 ** (-12 / 20))
    assert quiet is not None and loud - quiet == pytest.approx(12.0, abs=0.01)
    # a pause around the words does not make them quieter
    padded = np.concatenate([np.zeros(SR // 4, np.float32), voice, np.zeros(SR // 4, np.float32)])
    assert speech_level_db(padded) == pytest.approx(loud, abs=0.5)
    silent = speech_level_db(np.zeros(SR, np.float32))
    assert silent is not None and silent <= -90
    assert speech_level_db(np.zeros(100, np.float32)) is None  # not one 20 ms frame


def test_similarity_finds_a_misheard_copy_and_tells_sentences_apart() -> None:
    # copies as Whisper decoded them from the quieter microphone (tests/web/test_room_crosstalk)
    assert similarity("As not!", JFK) == 1.0  # "as" ~ "ask"
    assert similarity("Not!", "ASK NOT!") == 1.0
    assert similarity("And so my fellow Americans.", JFK) == 1.0
    assert similarity("He was not exposed, your man.", SENTENCES[3]) >= 0.6
    assert similarity("Go forward, 10 meters.", "Go forward ten meters") >= 0.6
    # two different sentences, however short: never alike
    for i, a in enumerate(SENTENCES):
        for b in SENTENCES[i + 1 :]:
            if {a, b} != {JFK, SENTENCES[-1]}:  # Kennedy's two halves share words, in order
                assert similarity(a, b) < 0.5, (a, b, similarity(a, b))
    assert similarity("No.", "ask not") == 0.0  # one word: only the same word
    assert similarity("Yes.", "yesterday we met") == 0.0
    assert similarity("", JFK) == 0.0
    # written without spaces: compared character by character
    assert similarity("我们今天开会", "我们今天开会吧。") == 1.0
    assert similarity("我们今天开会", "明天下雨了") == 0.0


# --------------------------------------------------------------------------- the rule

BOTH = ("Ana", "Ben")


def room(config: CrossTalkConfig | None = None) -> CrossTalk[str]:
    """A room's check with Ana and Ben publishing."""
    check: CrossTalk[str] = CrossTalk(config)
    assert check.expire(0.0, present=BOTH) == []
    return check


@pytest.mark.parametrize("bleed_db", [-12.0, -6.0])
def test_each_sentence_once_under_its_speaker_whichever_comes_first(bleed_db: float) -> None:
    """Four turns, each heard by both microphones; the copy's final comes before or after the
    original's (two pipelines on one worker race). Copies are split differently (a quieter
    copy's pauses are cut elsewhere) and a little off in time."""
    check = room()
    out: list[Released[str]] = []
    t = 0.0
    turns = [("Ana", JFK), ("Ben", SENTENCES[2]), ("Ana", SENTENCES[1]), ("Ben", SENTENCES[3])]
    for n, (who, text) in enumerate(turns):
        other = "Ben" if who == "Ana" else "Ana"
        own = heard(who, text, t, t + 3.0, -16.0, segment=n)
        half = text.split(" ")
        cut = len(half) // 2
        level = -16.0 + bleed_db
        copies = [
            heard(other, " ".join(half[:cut]), t + 0.3, t + 1.4, level, segment=2 * n),
            heard(other, " ".join(half[cut:]), t + 1.6, t + 2.9, level, segment=2 * n + 1),
        ]
        order = [own, *copies] if n % 2 else [*copies, own]
        for i, h in enumerate(order):
            out += check.offer(h, f"{h.publisher}:{h.text}", now=10.0 * n + 0.1 * i)
        t += 4.0
    out += check.flush(100.0)
    assert sorted(shown(out)) == sorted(f"{w}:{x}" for w, x in turns)
    assert [r.verdict for r in out if r.verdict != "show"] == ["drop"] * 8
    assert all(r.held_s <= check.config.hold_s for r in out)


def test_people_really_talking_at_once_are_both_kept() -> None:
    """Both at once, each into their own microphone: the same times, words that differ. Kept
    whatever their levels (one may speak up, or have the more sensitive microphone)."""
    for ana_db, ben_db in [(-16.0, -16.0), (-16.0, -26.0), (-30.0, -14.0)]:
        check = room()
        out = check.offer(heard("Ana", SENTENCES[4], 1.0, 3.0, ana_db), "ana", now=0.0)
        out += check.offer(heard("Ben", SENTENCES[3], 0.8, 3.4, ben_db), "ben", now=0.1)
        out += check.flush(5.0)
        assert sorted(shown(out)) == ["ana", "ben"]


def test_the_same_words_later_or_as_loud_are_not_a_copy() -> None:
    check = room()
    out = check.offer(heard("Ana", SENTENCES[2], 1.0, 3.0, -16.0), "ana", now=0.0)
    # Ben repeats it after her, more quietly: not at the same time
    out += check.offer(heard("Ben", SENTENCES[2], 4.0, 6.0, -28.0), "ben-later", now=4.0)
    # both say the same at the same time, equally loud (a chorus "thank you"): both kept
    out += check.offer(heard("Ana", "Thank you all.", 8.0, 9.0, -16.0, segment=1), "a2", now=8.0)
    out += check.offer(heard("Ben", "Thank you all.", 8.1, 9.0, -17.0, segment=1), "b2", now=8.1)
    out += check.flush(20.0)
    assert sorted(shown(out)) == ["a2", "ana", "b2", "ben-later"]


def test_a_caption_that_could_be_a_copy_waits_for_the_others_at_most_hold_s() -> None:
    check = room(CrossTalkConfig(hold_s=1.0))
    # Ana's first final: her own level is not known yet, and Ben has captioned nothing: it
    # waits for his microphone's captions of that time
    assert check.offer(heard("Ana", SENTENCES[1], 0.0, 3.0, -16.0), "a1", now=10.0) == []
    assert check.due() == pytest.approx(11.0)
    assert check.expire(10.5) == []
    out = check.expire(11.0)  # none came: it goes out, late by hold_s
    assert shown(out) == ["a1"] and out[0].held_s == pytest.approx(1.0)
    assert check.due() is None
    # at her own level now: at once
    out = check.offer(heard("Ana", SENTENCES[4], 4.0, 6.0, -17.0, segment=1), "a2", now=20.0)
    assert shown(out) == ["a2"] and out[0].held_s == 0.0
    # much quieter than her own speech: it could be a copy of someone else's, so it waits...
    assert check.offer(heard("Ana", SENTENCES[2], 7.0, 9.0, -28.0, segment=2), "a3", now=30.0) == []
    # ... and Ben's louder caption with the same words shows it was his: left out
    out = check.offer(heard("Ben", SENTENCES[2], 7.1, 9.1, -16.0), "b1", now=30.4)
    assert [(r.payload, r.verdict) for r in out] == [("a3", "drop"), ("b1", "show")]
    assert out[0].held_s == pytest.approx(0.4)
    # quiet again, but Ben has captioned past it already: nothing of its time is to come
    out = check.offer(heard("Ana", SENTENCES[3], 8.0, 8.5, -28.0, segment=3), "a4", now=31.0)
    assert shown(out) == ["a4"] and out[0].held_s == 0.0


def test_a_first_turn_shows_at_once_while_the_other_microphone_is_quiet() -> None:
    """Issue 37 item 2: a publisher's first turn, no level known yet. It cannot be a copy of
    Ben's speech while Ben's segmenter heard none over its time (`quiet`: from, to on the
    room's clock): shown at once, partials included (held, each was replaced before it went
    out: no partials at all). While Ben's microphone hears speech there, the same caption
    waits, and Ben's louder caption of the same words still makes it a copy."""
    inf = float("inf")
    check = room()
    p1 = heard("Ana", "Feels like these", 0.3, 1.5, -28.0, kind="partial")
    out = check.offer(p1, "p1", now=1.8, quiet={"Ben": (-inf, 2.0)})  # silent since he joined
    assert shown(out) == ["p1"] and out[0].held_s == 0.0
    # his report a little behind (a segmenter keeps back what an utterance may still start
    # with): the caption waits until his audio should have passed it, then goes out
    p2 = heard("Ana", "Feels like these days go on", 0.3, 2.6, -28.0, kind="partial")
    assert check.offer(p2, "p2", now=2.9, quiet={"Ben": (-inf, 1.5)}) == []
    assert check.due() == pytest.approx(2.9 + (0.3 + 0.5 * 2.3 + 0.001 + 0.5 - 1.5) + 0.1)
    out = check.expire(3.46, quiet={"Ben": (-inf, 2.2)})
    assert shown(out) == ["p2"] and out[0].held_s == pytest.approx(0.56)
    out = check.offer(heard("Ana", SENTENCES[1], 0.3, 3.3, -28.0), "f1", now=3.9,
                      quiet={"Ben": (-inf, 3.6)})  # fmt: skip
    assert shown(out) == ["f1"] and out[0].held_s == 0.0
    # Ben's final of an utterance that ended at 2.0 may still cover a caption at 1.0-2.4
    quiet = {"Ben": (2.0, 9.0)}
    assert check.offer(heard("Ana", "Go forward.", 1.0, 2.4, -40.0, segment=1), "a2", now=9.5,
                       quiet=quiet) == []  # fmt: skip
    assert check.flush(9.6)[0].payload == "a2"

    # the same first caption while Ben's segmenter has heard speech from 0.2: a copy
    check = room()
    out = check.offer(p1, "p1", now=1.8, quiet={"Ben": (-inf, 0.2)})
    out += check.expire(2.0, quiet={"Ben": (-inf, 0.6)})  # his onset a little later: as much
    assert out == [] and check.due() is not None
    ben = heard("Ben", "Feels like these days", 0.2, 1.6, -16.0, kind="partial")
    out = check.offer(ben, "ben", now=2.1, quiet={"Ben": (-inf, 0.2)})
    assert [(r.payload, r.verdict) for r in out] == [("p1", "drop"), ("ben", "show")]


def test_a_caption_waits_longer_for_a_pipeline_that_is_behind() -> None:
    """A loaded worker: the room's twins come seconds apart (here 4 s). Ben's microphone is
    busy (his partial is open at Ana's time) and his pipeline behind: Ana's quiet caption waits
    for his captions of that time up to 1.5 times that gap, and goes out as soon as they say it
    was not his; never longer than max_hold_s."""
    check = room(CrossTalkConfig(hold_s=1.0, pace=1.5, max_hold_s=10.0))
    check.offer(heard("Ana", SENTENCES[1], 0.0, 3.0, -16.0), "a1", now=0.0)
    check.expire(1.0)
    out = check.offer(heard("Ben", SENTENCES[1], 0.1, 3.0, -28.0), "copy", now=4.0)
    assert [r.verdict for r in out] == ["drop"]  # its twin came 4 s after Ana's caption
    b = heard("Ben", "He was", 3.0, 4.0, -16.0, kind="partial", segment=7)
    assert shown(check.offer(b, "b", now=5.0)) == ["b"]  # at the room's level: at once
    assert check.offer(heard("Ana", SENTENCES[4], 4.0, 6.0, -28.0, segment=1), "a2", now=6.0) == []
    assert check.due() == pytest.approx(12.0)  # 1.5 x 4 s
    assert check.expire(9.0) == []
    out = check.offer(heard("Ben", SENTENCES[3], 3.0, 6.5, -16.0, segment=7), "b-final", now=9.5)
    assert sorted(shown(out)) == ["a2", "b-final"]
    assert next(r.held_s for r in out if r.payload == "a2") == pytest.approx(3.5)
    # never longer than max_hold_s, whatever gap was seen
    check.offer(heard("Ana", SENTENCES[2], 7.0, 9.0, -16.0, segment=2), "a3", now=20.0)
    check.offer(heard("Ben", SENTENCES[2], 7.0, 9.0, -28.0, segment=8), "late copy", now=40.0)
    check.offer(heard("Ben", "Go", 10.0, 10.5, -16.0, kind="partial", segment=9), "b2", now=41.0)
    assert check.offer(heard("Ana", SENTENCES[0], 10.0, 13.0, -29.0, segment=3), "a4", now=42) == []
    assert check.due() == pytest.approx(52.0)
    assert check.expire(51.9) == []
    assert shown(check.expire(52.0)) == ["a4"]


def test_the_rooms_first_caption_waits_as_long_as_the_worker_is_behind() -> None:
    """Nothing is known yet (no level, no twins): a first caption that came 12 s after its
    speech (a worker far behind) waits up to half that for the other microphone's."""
    check = room(CrossTalkConfig(hold_s=1.0, lag_share=0.5, max_hold_s=10.0))
    late = Heard("Ben", "final", 0, JFK, 1.0, 4.0, -28.0, lag_s=12.0)
    assert check.offer(late, "copy", now=100.0) == []
    assert check.due() == pytest.approx(106.0)
    out = check.offer(Heard("Ana", "final", 0, JFK, 1.1, 4.2, -16.0, lag_s=16.0), "own", now=104)
    assert [(r.payload, r.verdict) for r in out] == [("copy", "drop"), ("own", "show")]


def test_a_copy_in_pieces_waits_for_the_whole_of_the_others_sentence() -> None:
    """Ana's pipeline sent Ben's sentence (heard quietly) as two finals, the first at its
    comma; Ben's pipeline sends it whole, at its end, seconds later: while Ana's sentence goes
    on (a caption that starts where the waiting one ends), the first piece waits on."""
    check = room(CrossTalkConfig(hold_s=1.0, pace=1.5, max_hold_s=10.0))
    check.offer(heard("Ana", SENTENCES[1], 0.0, 3.0, -16.0), "a1", now=0.0)
    check.expire(1.0)
    check.offer(heard("Ben", SENTENCES[1], 0.1, 3.0, -28.0), "copy", now=3.0)  # 3 s apart
    first = heard("Ana", "What your country can do for you?", 4.0, 6.8, -28.0, segment=1)
    assert check.offer(first, "piece 1", now=10.0) == []
    assert check.due() == pytest.approx(14.5)
    rest = heard("Ana", "Ask what you can do for your country.", 6.8, 9.6, -29.0, segment=2)
    assert check.offer(rest, "piece 2", now=13.5) == []
    assert check.due() == pytest.approx(18.0)  # waits on from the second piece
    whole = heard("Ben", JFK.split(", ", 1)[1] + " Ask what you can do for your country.",
                  3.9, 9.7, -16.0, segment=3)  # fmt: skip
    out = check.offer(whole, "Ben's", now=17.0)
    assert [(r.payload, r.verdict) for r in out] == [
        ("piece 1", "drop"), ("piece 2", "drop"), ("Ben's", "show")
    ]  # fmt: skip


def test_a_single_publisher_never_waits() -> None:
    check: CrossTalk[str] = CrossTalk()
    out = check.offer(heard("Ana", SENTENCES[1], 0.0, 3.0, -30.0), "a1", now=0.0, present=["Ana"])
    assert shown(out) == ["a1"] and out[0].held_s == 0.0


def test_a_copy_shown_as_a_partial_is_cleared_and_its_final_left_out() -> None:
    """Ben's microphone hears Ana. His copy's first partial went out (nothing to compare it
    with yet, and it waited its hold_s); once Ana's louder partial with the same words is
    there, Ben's next partial is sent empty (it clears his line) and his final is left out;
    Ana's words are never shown under Ben's name again."""
    check = room()
    b1 = heard("Ben", "And so my", 0.3, 1.2, -28.0, kind="partial", segment=5)
    assert check.offer(b1, "b-partial-1", now=0.0) == []
    assert shown(check.expire(1.0)) == ["b-partial-1"]
    a1 = heard("Ana", "And so my fellow", 0.2, 1.5, -16.0, kind="partial", segment=1)
    assert shown(check.offer(a1, "a-partial", now=1.1)) == ["a-partial"]  # louder: own
    b2 = heard("Ben", "And so my fellow Americans", 0.3, 2.0, -28.0, kind="partial", segment=5)
    out = check.offer(b2, "b-partial-2", now=1.6)
    assert [(r.payload, r.verdict) for r in out] == [("b-partial-2", "clear")]
    b3 = heard("Ben", "And so my fellow Americans.", 0.3, 2.4, -28.0, segment=5)
    assert [(r.payload, r.verdict) for r in check.offer(b3, "b-final", now=2.0)] == [
        ("b-final", "drop")
    ]
    a2 = heard("Ana", "And so my fellow Americans.", 0.2, 2.5, -16.0, segment=1)
    assert shown(check.offer(a2, "a-final", now=2.1)) == ["a-final"]


def test_a_publishers_captions_keep_their_order() -> None:
    """A waiting final holds its publisher's next partial (the room numbers segments in the
    order they appear); a newer partial replaces a waiting one of its segment."""
    check = room()
    assert check.offer(heard("Ana", SENTENCES[1], 0.0, 3.0, -16.0), "final-1", now=0.0) == []
    p = heard("Ana", "Go", 3.5, 4.0, -16.0, kind="partial", segment=1)
    assert check.offer(p, "partial-2a", now=0.5) == []
    p = heard("Ana", "Go forward", 3.5, 4.5, -16.0, kind="partial", segment=1)
    assert check.offer(p, "partial-2b", now=0.8) == []
    out = check.expire(1.0)
    assert shown(out) == ["final-1", "partial-2b"]  # her level is known now: no more wait
    assert out[1].held_s == pytest.approx(0.2)


def test_captions_without_a_level_or_text_pass() -> None:
    """Unmeasured captions are never judged; an empty caption (it clears a partial) goes out
    only where something of its segment is on screen."""
    check = room()
    out = check.offer(heard("Ana", JFK, 0.0, 3.0, None), "unmeasured", now=0.0)
    assert shown(out) == ["unmeasured"]
    out = check.offer(heard("Ben", "", 0.0, 3.0, -20.0, segment=3), "empty", now=0.1)
    assert [r.verdict for r in out] == ["drop"]


def test_old_finals_stop_being_evidence() -> None:
    """A final is evidence for `memory_s` of the room's clock: a copy that comes later than
    that (a worker far behind) is no longer recognised, and goes out after its wait."""
    check = room(CrossTalkConfig(memory_s=10.0))
    check.offer(heard("Ana", SENTENCES[2], 0.0, 2.0, -16.0), "a", now=0.0)
    late = heard("Ben", SENTENCES[2], 0.1, 2.1, -28.0)
    out = check.offer(late, "copy", now=0.1)
    assert [(r.payload, r.verdict) for r in out] == [("a", "show"), ("copy", "drop")]
    for i in range(1, 4):
        check.offer(heard("Ana", SENTENCES[1], 5.0 * i, 5.0 * i + 2, -16.0, segment=i),
                    f"a{i}", now=i)  # fmt: skip
    late = heard("Ben", SENTENCES[2], 0.1, 2.1, -28.0, segment=1)
    assert [r.verdict for r in check.offer(late, "too-late", now=5.0)] == ["show"]
