"""The partial-name figures (`streamcap.evaluation.partial_names`) on a hand-made timeline.

No model: the captions a run would have emitted, with their emission times and names, against
a reference of three turns (A, B, then A again: a change to a voice heard before); every figure
below is worked out by hand in the comments.
"""

from __future__ import annotations

import pytest

from streamcap.core.captions import Caption
from streamcap.evaluation.partial_names import partial_name_figures, shown_names

SEGMENTS = [
    {"start": 0.0, "end": 3.0, "speaker": "A", "text": "one"},
    {"start": 3.5, "end": 6.0, "speaker": "B", "text": "two"},
    {"start": 6.5, "end": 9.0, "speaker": "A", "text": "three"},
]
LABELS = {"Speaker 1": "A", "Speaker 2": "B"}


def cap(kind: str, segment: int, start: float, end: float, speaker: str = "") -> Caption:
    return Caption(kind, "eval", 0, segment, "words", start, end, 5, 0.0, speaker=speaker)  # type: ignore[arg-type]


EVENTS = [
    (1.5, cap("partial", 1, 0.0, 1.5)),  # on screen 1.5-2.5, unnamed
    (2.5, cap("partial", 1, 0.0, 2.5)),  # 2.5-3.2, unnamed
    (3.2, cap("final", 1, 0.0, 3.0, "Speaker 1")),
    (4.8, cap("partial", 2, 3.5, 4.8)),  # 4.8-5.5, unnamed (before: under Speaker 1, wrong)
    (5.5, cap("partial", 2, 3.5, 5.5)),  # 5.5-6.2, the same
    (6.2, cap("final", 2, 3.5, 6.0, "Speaker 2")),
    (7.6, cap("partial", 3, 6.5, 7.6)),  # 7.6-8.0, unnamed (before: under Speaker 2, wrong)
    (8.0, cap("partial", 3, 6.5, 8.0, "Speaker 1")),  # 8.0-8.6, right
    (8.6, cap("partial", 3, 6.5, 8.6, "Speaker 2")),  # 8.6-9.4, wrong
    (9.4, cap("final", 3, 6.5, 9.0, "Speaker 1")),
]


def test_what_a_viewer_sees() -> None:
    shown = shown_names(EVENTS, "own_line")
    assert [(a, b, n) for a, b, _, n in shown] == [
        (1.5, 2.5, ""), (2.5, 3.2, ""), (4.8, 5.5, ""), (5.5, 6.2, ""),
        (7.6, 8.0, ""), (8.0, 8.6, "Speaker 1"), (8.6, 9.4, "Speaker 2"),
    ]  # fmt: skip
    before = [n for _, _, _, n in shown_names(EVENTS, "previous")]
    assert before == ["", "", "Speaker 1", "Speaker 1", "Speaker 2", "Speaker 1", "Speaker 2"]


def test_seconds_under_a_wrong_name() -> None:
    f = partial_name_figures(EVENTS, SEGMENTS, LABELS, "own_line")
    assert f["partial_shown_s"] == pytest.approx(4.9)
    assert f["partial_wrong_name_s"] == pytest.approx(0.8)  # 8.6-9.4
    assert f["partial_right_name_s"] == pytest.approx(0.6)  # 8.0-8.6
    assert f["partial_unnamed_s"] == pytest.approx(3.5)
    before = partial_name_figures(EVENTS, SEGMENTS, LABELS, "previous")
    assert before["partial_wrong_name_s"] == pytest.approx(1.4 + 0.4 + 0.8)
    assert before["partial_unnamed_s"] == pytest.approx(1.7)  # nobody labelled yet
    # a name the mapping does not know is wrong
    odd = [(t, c if c.speaker != "Speaker 1" or c.type != "partial" else
            cap("partial", 3, 6.5, 8.0, "Speaker 9")) for t, c in EVENTS]  # fmt: skip
    assert partial_name_figures(odd, SEGMENTS, LABELS)["partial_wrong_name_s"] == pytest.approx(1.4)


def test_delay_from_a_change_of_voice_to_its_right_name() -> None:
    f = partial_name_figures(EVENTS, SEGMENTS, LABELS)
    assert f["voice_changes"] == 1  # turn 3: A, heard before
    assert f["voice_changes_new"] == 1  # turn 2: B speaks for the first time
    assert f["naming_delay_s_p50"] == pytest.approx(1.5)  # named right at 8.0, turn from 6.5
    assert f["naming_lag_s_p50"] == pytest.approx(0.4)  # its words on screen from 7.6
    assert f["named_within_1_5s"] == 1 and f["never_named"] == 0
    # no right name before the final: the final names it (9.4 - 6.5)
    late = [(t, c) for t, c in EVENTS if not (c.type == "partial" and c.speaker)]
    g = partial_name_figures(late, SEGMENTS, LABELS)
    assert g["naming_delay_s_p50"] == pytest.approx(2.9) and g["named_within_1_5s"] == 0
    # a wrong final too: never named
    wrong = [(t, cap("final", 3, 6.5, 9.0, "Speaker 2") if t == 9.4 else c) for t, c in late]
    assert partial_name_figures(wrong, SEGMENTS, LABELS)["never_named"] == 1
