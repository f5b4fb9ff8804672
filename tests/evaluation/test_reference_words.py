"""Reference word times by forced alignment (`evaluation.reference_words`), on real speech with
the bundled model: every reference word comes back, in order, inside its utterance, also for
an utterance longer than one window (aligned in parts)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from streamcap.evaluation.reference_words import (
    align_reference,
    load_reference_words,
    save_reference_words,
)

pytestmark = [pytest.mark.model]

JFK = (
    "And so my fellow Americans, ask not what your country can do for you, "
    "ask what you can do for your country."
)


def test_every_reference_word_is_timed_in_order(
    engine: Any, speech: dict[str, Any], tmp_path: Path
) -> None:
    jfk = speech["en_real_jfk"]
    gap = np.zeros(16000, np.float32)
    # one short utterance, then one of 3 x 11 s (more than a window holds: aligned in parts)
    audio = np.concatenate([gap, speech["en_real_goforward"], gap, jfk, jfk, jfk, gap])
    go_end = 1 + len(speech["en_real_goforward"]) / 16000
    segments = [
        {"start": 1.0, "end": go_end, "text": "Go forward ten meters."},
        {
            "start": go_end + 1,
            "end": go_end + 1 + 3 * len(jfk) / 16000,
            "text": " ".join([JFK] * 3),
        },
    ]
    words = align_reference(engine, audio, segments)
    assert [w.word for w in words] == " ".join(s["text"] for s in segments).split()
    starts = [w.start for w in words]
    assert starts == sorted(starts) and all(w.end >= w.start for w in words)
    for w in words:  # inside its utterance, give or take the margin
        seg = segments[w.segment]
        assert seg["start"] - 0.35 <= w.start and w.end <= seg["end"] + 0.35, w
    # each of the three readings starts where its audio does (the parts were cut right)
    firsts = [w.start for w in words if w.word == "And"]
    expected = [segments[1]["start"] + k * len(jfk) / 16000 for k in range(3)]
    assert len(firsts) == 3
    assert all(abs(a - b) < 1.0 for a, b in zip(firsts, expected, strict=True)), firsts
    path = tmp_path / "ref.json"
    save_reference_words(path, words, "test")
    assert load_reference_words(path) == words
