"""A partial's `tentative` words (issue 37, item 6): what its decode heard after the words it
shows, for a viewer that lights the word being said (the overlay's ``highlight=words``) — the
shown text itself keeps its holdback. Pure: the policy driven by hand, no model or clock."""

from __future__ import annotations

import numpy as np
import pytest
from policy_driver import SR, result

from streamcap.core.captions import Caption, CaptionEvent, CaptionLog
from streamcap.core.policy import CaptionPolicy
from streamcap.core.policy_config import PolicyConfig
from streamcap.core.segmenter import SpeechAudio, SpeechEnd, SpeechStart

HEARD = ["one two three four", "one two three four five six.", "one two three four five six."]


def _captions(cfg: PolicyConfig) -> list[CaptionEvent]:
    """Three partials hearing `HEARD` a second apart, then the window's final."""
    pol = CaptionPolicy(cfg)
    pol.on_event(SpeechStart(0.0))
    out: list[CaptionEvent] = []
    for k, heard in enumerate(HEARD, 1):
        (req,) = pol.on_event(SpeechAudio(np.zeros(SR, np.float32), k - 1.0, float(k))).requests
        out += pol.on_result(req, result(heard), k + 0.1).captions
    (final,) = pol.on_event(SpeechEnd(0.0, 3.0, "silence")).requests
    return out + pol.on_result(final, result("One two three four five six."), 3.5).captions


def test_a_partial_carries_the_words_it_heard_but_does_not_show() -> None:
    caps = _captions(PolicyConfig())
    partials = [(c.text, c.tentative) for c in caps if c.type == "partial"]
    # holdback 2: the first shows two of four words; the next shows one more than the last
    # partial agreed on (lead_words 1); the rest but the last word heard is tentative
    assert partials == [
        ("One two", "three"),
        ("One two three four", "five"),
        ("One two three four five six", ""),  # agreed: all shown (a partial's only word is)
    ]
    final = caps[-1]
    assert final.type == "final" and final.tentative == ""


@pytest.mark.parametrize(
    ("left_out", "want"), [(None, ["", "", ""]), (0, ["three four", "five six", ""])]
)
def test_how_many_last_words_are_left_out(left_out: int | None, want: list[str]) -> None:
    caps = _captions(PolicyConfig(tentative_holdback_words=left_out))
    # with none left out the last word is in, its sentence punctuation trimmed like the text's
    assert [c.tentative for c in caps if c.type == "partial"] == want
    assert [c.text for c in caps] == [c.text for c in _captions(PolicyConfig())]  # unchanged


def test_tentative_words_are_on_the_wire_for_partials_only() -> None:
    log = CaptionLog("s")
    partial = log.add(CaptionEvent("partial", 1, "One two", 0.0, 1.0, tentative="three"))
    wire = partial.to_dict()
    assert wire["tentative"] == "three" and Caption.from_dict(wire) == partial
    final = log.add(CaptionEvent("final", 1, "One two three.", 0.0, 1.0, 14, tentative="x"))
    assert "tentative" not in final.to_dict() and final.tentative == ""
    assert "tentative" not in log.add(CaptionEvent("partial", 2, "Hi", 1.0, 2.0)).to_dict()


def test_config_refuses_a_negative_count() -> None:
    with pytest.raises(ValueError, match="tentative_holdback_words"):
        PolicyConfig(tentative_holdback_words=-1)
