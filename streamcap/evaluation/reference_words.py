"""Reference word times for a long-form dev file by forced alignment of its reference text.

The dev files (``../shared/eval-dev/longform/*.json``) give each utterance's ``start``, ``end``
and ``text``, but no word times; measuring when the overlay lights a word (`highlight_lag`)
needs them. They are made here independently of the live path: each reference utterance's own
text (not a transcript) is tokenized and aligned to that utterance's audio, with a little room
either side, by the bundled model's cross-attention DTW (`Engine.align`, the pass that
times finals): one encoder call on the utterance's audio and one alignment pass over the
reference tokens. No decode runs, so nothing the live pipeline decodes or decides enters them.

The DTW's accuracy on this kind of audio is documented in `streamcap.decoding.alignment`
(first-word starts within about 0.1 s on lf3's recorded utterances).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from streamcap.core.constants import SAMPLE_RATE
from streamcap.core.cuts import cut_after
from streamcap.core.decode_types import DecodeResult, DecodingOptions
from streamcap.core.text import align_prefix

if TYPE_CHECKING:
    from streamcap.runtime.engine import Engine

__all__ = ["RefWord", "align_reference", "load_reference_words", "save_reference_words"]

#: Audio kept before and after an utterance (at most half the gap to its neighbour).
MARGIN_S = 0.3


@dataclass(frozen=True)
class RefWord:
    """One reference word: its text as the reference writes it, its time in the file
    (seconds) and the index of its utterance in the reference's ``segments``."""

    word: str
    start: float
    end: float
    segment: int


def _bounds(segments: Sequence[dict[str, Any]], i: int, duration: float) -> tuple[float, float]:
    """The audio span aligned for utterance ``i``: its own span, widened by `MARGIN_S` but
    never past the middle of the gap to a neighbour."""
    s = segments[i]
    lo = s["start"] - MARGIN_S
    hi = s["end"] + MARGIN_S
    if i > 0:
        lo = max(lo, (segments[i - 1]["end"] + s["start"]) / 2)
    if i + 1 < len(segments):
        hi = min(hi, (s["end"] + segments[i + 1]["start"]) / 2)
    return max(0.0, lo), min(duration, hi)


def align_reference(
    engine: Engine,
    audio: npt.NDArray[np.float32],
    segments: Sequence[dict[str, Any]],
    language: str = "en",
) -> list[RefWord]:
    """Every word of every reference utterance with its time in the file (see the module)."""
    duration = len(audio) / SAMPLE_RATE
    options = DecodingOptions(language=language if engine.multilingual else None)
    out: list[RefWord] = []
    for i, seg in enumerate(segments):
        words = str(seg["text"]).split()
        lo, hi = _bounds(segments, i, duration)
        while words and hi - lo > MAX_WINDOW_S:  # a long monologue: in parts (`_split`)
            cut, n = _split(engine, audio, lo, options, words)
            out += _forced(engine, audio, lo, lo + cut, words[:n], options, language, i)
            lo, words = lo + cut, words[n:]
        out += _forced(engine, audio, lo, hi, words, options, language, i)
    return out


#: The longest audio aligned at once (a window holds 30 s).
MAX_WINDOW_S = 28.0


def _forced(
    engine: Engine,
    audio: npt.NDArray[np.float32],
    lo: float,
    hi: float,
    words: Sequence[str],
    options: DecodingOptions,
    language: str,
    segment: int,
) -> list[RefWord]:
    """``words`` aligned to the audio from ``lo`` to ``hi`` (seconds in the file)."""
    if not words:
        return []
    text = " " + " ".join(words)
    encoded = engine.encode(audio[round(lo * SAMPLE_RATE) : round(hi * SAMPLE_RATE)])
    forced = DecodeResult(tuple(engine.text_to_ids(text)), text, language, 0.0, None, "eot")
    timed = engine.align(encoded, options, forced).words
    return [RefWord(w.word.strip(), lo + w.start, lo + w.end, segment) for w in timed]


def _split(
    engine: Engine,
    audio: npt.NDArray[np.float32],
    lo: float,
    options: DecodingOptions,
    words: Sequence[str],
) -> tuple[float, int]:
    """Where to end the first part of a long utterance that starts at ``lo``: (seconds into
    it, how many of its reference ``words`` that part holds). The model's decode of the
    first `MAX_WINDOW_S` only chooses the cut: after its third last word (its last words may
    be cut off), between words (`cuts.cut_after`); the reference words up to there are found
    by edit distance (`text.align_prefix`). The times come from the forced alignment."""
    window = audio[round(lo * SAMPLE_RATE) : round((lo + MAX_WINDOW_S) * SAMPLE_RATE)]
    encoded = engine.encode(window)
    decoded = engine.align(encoded, options, engine.decode(encoded, options)).words
    k = len(decoded) - 2
    if k < 1:
        raise ValueError(f"no words decoded in {MAX_WINDOW_S} s of audio from {lo:.1f} s")
    n = align_prefix([w.word for w in decoded[:k]], words)
    return cut_after(decoded, k, MAX_WINDOW_S), n


def save_reference_words(path: Path, words: Sequence[RefWord], source: str) -> None:
    """Write `words` as JSON (``{"source", "method", "words": [...]}``)."""
    doc = {
        "source": source,
        "method": "forced alignment of the reference text, bundled model's cross-attention DTW",
        "words": [asdict(w) for w in words],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=0) + "\n", encoding="utf-8")


def load_reference_words(path: Path) -> list[RefWord]:
    """The words `save_reference_words` wrote."""
    doc = json.loads(path.read_text(encoding="utf-8"))
    return [RefWord(str(w["word"]), float(w["start"]), float(w["end"]), int(w["segment"]))
            for w in doc["words"]]  # fmt: skip
