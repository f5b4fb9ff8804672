"""The two measures of the cross-talk rule (`core.crosstalk`): how loud a microphone heard
some speech, and how much two captions say the same words. Pure functions: a caption's level
is measured where its audio is (`core.policy_text`), the words compared in the room's check."""

from __future__ import annotations

import re

import numpy as np
from rapidfuzz import fuzz, process

from streamcap.core.constants import SAMPLE_RATE

__all__ = ["similarity", "speech_level_db"]

#: 20 ms frames at 16 kHz: a level per syllable-sized piece.
_FRAME = SAMPLE_RATE // 50
#: A word; in scripts written without spaces (Chinese, Japanese), each character.
_WORD = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]|\w+(?:'\w+)*")


def speech_level_db(samples: np.ndarray) -> float | None:
    """How loud the speech in `samples` is, in dB full scale: the 90th percentile of the power
    of its 20 ms frames (the loud part of speech, whatever the pauses around it; the same
    sentence measured on two microphones differs by how much louder one heard it). None when
    there is not one frame."""
    n = len(samples) // _FRAME
    if n == 0:
        return None
    frames = np.asarray(samples[: n * _FRAME], dtype=np.float64).reshape(n, _FRAME)
    power = float(np.percentile(np.mean(frames * frames, axis=1), 90))
    return 10.0 * float(np.log10(power + 1e-10))


def similarity(a: str, b: str, word_match: float = 0.75) -> float:
    """How much of the shorter text's words the other says, in the same order (0..1): the
    longest common subsequence of words, two words the same when their spelling is at least
    `word_match` alike (rapidfuzz's normalised Indel ratio). A single word must be found exactly;
    longer texts need two words in common (one short word in common says nothing)."""
    wa, wb = _WORD.findall(a.lower()), _WORD.findall(b.lower())
    if not wa or not wb:
        return 0.0
    if len(wa) > len(wb):
        wa, wb = wb, wa
    if len(wa) == 1:
        return 1.0 if wa[0] in wb else 0.0
    alike = process.cdist(wa, wb, scorer=fuzz.ratio, score_cutoff=100 * word_match) > 0
    row = [0] * (len(wb) + 1)  # longest common subsequence, one row at a time
    for i in range(len(wa)):
        prev, row = row, [0] * (len(wb) + 1)
        for j in range(len(wb)):
            row[j + 1] = prev[j] + 1 if alike[i, j] else max(prev[j + 1], row[j])
    common = row[-1]
    return common / len(wa) if common >= 2 else 0.0
