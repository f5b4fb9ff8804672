"""Two real voices taking turns, for the speaker-label tests of the labeller and of the CLI."""

from __future__ import annotations

from typing import Any

import numpy as np

SR = 16000
JFK_CUT_S = 4.9  # JFK's clip is cut here: a pause between "ask not" and "what"


def clip(speech: dict[str, Any], name: str) -> np.ndarray:
    return np.asarray(speech[name], dtype=np.float32)


def two_voices(speech: dict[str, Any]) -> tuple[np.ndarray, list[tuple[float, float, str]]]:
    """The librivox reader and JFK, alternating, 1.5 s of silence between: (audio, spans)."""
    jfk = clip(speech, "en_real_jfk")
    cut = int(JFK_CUT_S * SR)
    parts = [("reader", clip(speech, "en_real_librivox_0870")), ("jfk", jfk[:cut]),
             ("reader", clip(speech, "en_real_librivox_0880")), ("jfk", jfk[cut:])]  # fmt: skip
    gap = np.zeros(int(1.5 * SR), np.float32)
    audio: list[np.ndarray] = [gap]
    spans = []
    t = len(gap) / SR
    for who, x in parts:
        spans.append((t, t + len(x) / SR, who))
        audio += [x, gap]
        t += (len(x) + len(gap)) / SR
    return np.concatenate(audio), spans
