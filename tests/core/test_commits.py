"""Commits that lose nothing, on real speech (issue: finals lost or mangled words at a cut).

When the policy commits part of an utterance it cuts the window at the committed words' end
(`cuts.cut_after`, from the decode's word times) and decodes the rest on its own audio (without
a prompt: the policy's default, see `PolicyConfig.prompt_chars`). Here real clips are cut at
many positions with that rule, and at
random positions inside words, and the two decodes joined are compared with the decode of the
whole clip: a cut between words must lose no word (a part decoded with less context may still
mishear one: "And so my" alone is "and so am I"), and a cut inside a word may cost that word
and a neighbour it runs into, nothing more.
"""

from __future__ import annotations

import random
from typing import Any

import jiwer
import numpy as np
import pytest

from streamcap.core.cuts import cut_after
from streamcap.core.decode_types import DecodingOptions
from streamcap.core.text import norm_text

SR = 16000
EN = DecodingOptions(language="en")


def _decode(engine: Any, audio: np.ndarray) -> Any:
    enc = engine.encode(audio)
    return engine.align(enc, EN, engine.decode(enc, EN))


def _edits(ref: str, hyp: str) -> tuple[int, int, int]:
    """(substituted, deleted, inserted) words of `hyp` against `ref`, normalised."""
    out = jiwer.process_words(norm_text(ref), norm_text(hyp))
    return out.substitutions, out.deletions, out.insertions


@pytest.mark.model
@pytest.mark.parametrize("clip", ["en_real_jfk", "en_real_librivox_0870"])
def test_cuts_at_word_boundaries_lose_and_duplicate_no_word(
    engine: Any, speech: dict[str, np.ndarray], clip: str
) -> None:
    audio = speech[clip]
    whole = _decode(engine, audio)
    words = list(whole.words)
    assert len(words) == len(whole.text.split()) >= 12
    duration = len(audio) / SR
    rng = random.Random(3)
    report = []
    for j in range(3, len(words) - 2, 4):  # cuts between words, as the policy makes them
        cut = cut_after(words, j, duration)
        first = _decode(engine, audio[: round(cut * SR)])
        rest = _decode(engine, audio[round(cut * SR) :])
        joined = first.text + " " + rest.text
        report.append((j, round(cut, 2), _edits(whole.text, joined), joined))
    for _ in range(3):  # cuts anywhere, inside words too
        w = rng.randrange(1, len(words) - 1)
        cut = rng.uniform(words[w].start, words[w].end)
        first = _decode(engine, audio[: round(cut * SR)])
        rest = _decode(engine, audio[round(cut * SR) :])
        joined = first.text + " " + rest.text
        report.append((-w, round(cut, 2), _edits(whole.text, joined), joined))
    print(whole.text, *report, sep="\n")
    # between words: no word lost; a part decoded with less context may mishear one word
    # ("And so my" alone came out "and so am I"), never more
    between = [e for j, _, e, _ in report if j > 0]
    assert all(d == 0 and s + i <= 2 for s, d, i in between), report
    assert sum(sum(e) == 0 for e in between) >= len(between) / 2, report  # mostly exact
    # inside a word: that word (and one it runs into) at most
    assert all(sum(e) <= 2 for j, _, e, _ in report if j < 0), report
