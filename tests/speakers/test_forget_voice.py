"""Taking an enrolled voice back, and replacing its sample (issue 37, item 4: ``DELETE
/streams/ID/voices?name=Mary``, ``POST ...&replace=1``): later finals no longer get the name,
and no other speaker's label changes, in the tracker's rules on synthetic voices (those of
tests/speakers/test_speakers.py). The server side: tests/server/test_voices.py.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_speakers import utterance, voices

from streamcap.core.speaker_removal import forget_voice
from streamcap.core.speakers import SpeakerTracker
from streamcap.runtime.enrol import EnrolledVoice, EnrolmentError, enrol_late, replace_late


def labels(t: SpeakerTracker, late: dict[int, str]) -> list[str]:
    """Every speaker's label as the labeller gives it (`SpeakerLabeller.label`)."""
    return [late.get(k) or t.label(k) for k in range(len(t))]


def test_a_voice_taken_back_names_no_later_final_and_moves_no_label() -> None:
    v = voices(5)
    rng = np.random.default_rng(11)
    t, late = SpeakerTracker(), {}
    t.enrol("Mary", utterance(v[0], rng), 8.0)
    assert t.assign(utterance(v[1], rng), 3.0).new  # Speaker 1
    assert t.assign(utterance(v[0], rng), 3.0).speaker == 0  # Mary speaks: previous is her
    t.enrol("Ben", utterance(v[2], rng), 8.0)
    assert t.assign(utterance(v[3], rng), 3.0).new  # Speaker 2
    late[4] = "Joe"  # a voice numbered before its sample came (`enrol_late`)
    assert t.assign(utterance(v[4], rng), 3.0).new
    assert labels(t, late) == ["Mary", "Speaker 1", "Ben", "Speaker 2", "Joe"]
    t.previous = 0
    assert forget_voice(t, late, "Nobody") is None and len(t) == 5  # nothing changes

    assert forget_voice(t, late, "Mary") == ""  # her speaker is gone, no one else moves
    assert labels(t, late) == ["Speaker 1", "Ben", "Speaker 2", "Joe"]
    assert t.previous is None and late == {3: "Joe"}
    assert t.label(t.assign(utterance(v[2], rng), 3.0).speaker or 0) == "Ben"
    assert t.previous == 1
    d = t.assign(utterance(v[0], rng), 3.0)  # her voice again: one not heard yet, numbered
    assert d.new and labels(t, late)[d.speaker or 0] == "Speaker 4"  # Joe was Speaker 3
    assert forget_voice(t, late, "Mary") is None

    # a late name: the speaker is its number again, its centroid kept
    assert forget_voice(t, late, "Joe") == "Speaker 3" and late == {}
    d = t.assign(utterance(v[4], rng), 3.0)
    assert not d.new and t.label(d.speaker or 0) == "Speaker 3" and t.previous == 3
    forget_voice(t, late, "Ben")  # before `previous`: it moves down with its speaker
    assert labels(t, late) == ["Speaker 1", "Speaker 2", "Speaker 3", "Speaker 4"]
    assert t.previous == 2


def test_a_replaced_sample_takes_the_old_ones_place_or_nothing_changes() -> None:
    v = voices(4)
    rng = np.random.default_rng(12)

    def voice(name: str, k: int) -> EnrolledVoice:
        return EnrolledVoice(name, "ge2e", utterance(v[k], rng), 8.0)

    t, late = SpeakerTracker(), {}
    assert enrol_late(t, t.label, late, "ge2e", voice("Mary", 0)) == ""
    t.assign(utterance(v[1], rng), 3.0)  # Speaker 1
    enrol_late(t, t.label, late, "ge2e", voice("Ben", 2))
    # Mary's first sample was someone else's voice (v[3]); the new one is hers
    t2, late2, was = replace_late(t, late, "ge2e", voice("Mary", 3))
    assert was == "" and labels(t2, late2) == ["Speaker 1", "Ben", "Mary"]
    assert t2.label(t2.assign(utterance(v[3], rng), 3.0).speaker or 0) == "Mary"
    assert labels(t, late) == ["Mary", "Speaker 1", "Ben"]  # the copies changed, not these
    # a new sample that is another name's voice: refused, and nothing changed
    with pytest.raises(EnrolmentError, match="Ben's already"):
        replace_late(t2, late2, "ge2e", voice("Mary", 2))
    assert labels(t2, late2) == ["Speaker 1", "Ben", "Mary"]
    # a sample of a voice the meeting numbered: that speaker takes the name
    t3, late3, was = replace_late(t2, late2, "ge2e", voice("Mary", 1))
    assert was == "Speaker 1" and labels(t3, late3) == ["Mary", "Ben"]
