"""The rules of a rename (issue 37, item 4: "Speaker 2" -> "Mary"), `core.speaker_names`: what
a request may hold, how it changes a stream's names map, how the map applies to a caption.
Pure: no server. The name rules are the server's (`client_text.name_rule`), as in use."""

from __future__ import annotations

import pytest

from streamcap.core.captions import Caption
from streamcap.core.speaker_names import (
    MAX_NAMES,
    NamesError,
    check_map,
    merge_names,
    parse_request,
    renamed,
    shown_as,
)
from streamcap.server.client_text import name_rule


def request(obj: object) -> dict[str, str]:
    return parse_request(obj, name_rule)


def test_a_request_maps_labels_to_names() -> None:
    assert request({"Speaker 2": "Mary"}) == {"Speaker 2": "Mary"}
    assert request({"Speaker 2": ""}) == {"Speaker 2": ""}  # takes a rename back
    assert request({"Speaker 1": "Ana", "Speaker 2": "Zoë 🙂"}) == {
        "Speaker 1": "Ana", "Speaker 2": "Zoë 🙂",
    }  # fmt: skip


@pytest.mark.parametrize(
    ("obj", "why"),
    [
        ("Mary", "JSON object"),
        ([["Speaker 2", "Mary"]], "JSON object"),
        ({}, "no rename"),
        ({"Speaker 2": None}, "strings"),
        ({"Speaker 2": 2}, "strings"),
        ({"": "Mary"}, "label"),
        ({"Speaker 2": "M" * 33}, "1-32"),
        ({"Speaker 2": "a\x07b"}, "name"),  # a control character
        ({"Speaker 2": "Ma\u200bry"}, "invisible"),  # zero width: a second "Mary"
        ({"Speaker 2": "Mary\u202e"}, "invisible"),  # bidi override
        ({"Speaker 2": "<i>Mary</i>"}, "no < > &"),
        ({"Speaker 2": "Mary  Ann"}, "normal form"),  # would not equal what is shown
        ({"Ｓpeaker 2": "Mary"}, "normal form"),  # full-width: no caption holds that label
        ({f"Speaker {i}": "x" for i in range(MAX_NAMES + 1)}, "at most"),
    ],
)
def test_a_bad_request_says_why(obj: object, why: str) -> None:
    with pytest.raises(NamesError, match=why):
        request(obj)


def test_merge_renames_adds_changes_and_takes_back() -> None:
    m = merge_names({}, {"Speaker 2": "Mary"})
    assert m == {"Speaker 2": "Mary"}
    assert merge_names(m, {"Speaker 1": "Ben"}) == {"Speaker 2": "Mary", "Speaker 1": "Ben"}
    assert merge_names(m, {"Speaker 2": "Maria"}) == {"Speaker 2": "Maria"}
    assert merge_names(m, {"Speaker 2": ""}) == {}
    assert merge_names(m, {"Speaker 2": "Speaker 2"}) == {}  # its own label: no rename
    assert merge_names(m, {"Speaker 3": ""}) == m  # nothing to take back
    assert m == {"Speaker 2": "Mary"}  # the current map is never changed in place


def test_a_name_shown_renames_the_voices_behind_it() -> None:
    """A page shows "Mary"; renaming "Mary" renames whatever shows as Mary (an enrolled voice
    labelled "Mary" as well as "Speaker 2" renamed to it)."""
    m = {"Speaker 2": "Mary", "Speaker 3": "Mary"}  # one person split in two labels: merged
    assert merge_names(m, {"Mary": "Mary Ann"}) == {
        "Speaker 2": "Mary Ann", "Speaker 3": "Mary Ann", "Mary": "Mary Ann",
    }  # fmt: skip
    assert merge_names(m, {"Mary": ""}) == {}
    # keys are read against the map before the request: the order does not matter
    assert merge_names(m, {"Mary": "Ann", "Speaker 4": "Mary"}) == merge_names(
        m, {"Speaker 4": "Mary", "Mary": "Ann"}
    )
    with pytest.raises(NamesError, match="two names"):
        merge_names(m, {"Mary": "Ann", "Speaker 2": "Bo"})


def test_a_map_has_a_bound() -> None:
    full = {f"Speaker {i}": f"N{i}" for i in range(MAX_NAMES)}
    assert merge_names(full, {"Speaker 0": "Zed"})["Speaker 0"] == "Zed"  # a change: fine
    with pytest.raises(NamesError, match="at most"):
        merge_names(full, {"Speaker 999": "One more"})


def test_a_stored_map_is_checked_as_a_request() -> None:
    assert check_map({"Speaker 2": "Mary"}, name_rule) == {"Speaker 2": "Mary"}
    for bad in ({"Speaker 2": ""}, {"Speaker 2": "Speaker 2"}, {"A": "B\u202e"}, ["A"], None):
        with pytest.raises(NamesError):
            check_map(bad, name_rule)


def test_the_map_applies_to_a_caption() -> None:
    cap = Caption("final", "s", 3, 1, "Hello.", 0.0, 1.0, 6, 0.0, speaker="Speaker 2")
    names = {"Speaker 2": "Mary"}
    assert renamed(cap, names).speaker == "Mary"
    assert renamed(cap, names).text == "Hello." and renamed(cap, names).seq == 3
    assert renamed(cap, {}) is cap and renamed(cap, {"Speaker 1": "Ben"}) is cap
    unnamed = Caption("partial", "s", 4, 2, "Hi", 1.0, 2.0, 0, 0.0)
    assert renamed(unnamed, {"": "Who"}) is unnamed  # nobody named stays nobody
    assert shown_as("", names) == "" and shown_as("Speaker 1", names) == "Speaker 1"
