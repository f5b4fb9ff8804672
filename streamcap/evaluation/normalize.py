"""Whisper's English normaliser: the one way the harness turns a text into words.

Reference and captions are compared after it (docs/design.md, "Measurement"): case,
punctuation, numbers and (with its spelling map) British/American spellings stop counting as
errors, as in Whisper's own WER figures.
"""

from __future__ import annotations

import importlib.resources
import json
from collections.abc import Callable

__all__ = ["Normalizer", "make_normalizer"]

#: A text normaliser: text in, normalised text out.
Normalizer = Callable[[str], str]


def make_normalizer(spelling_map: bool = True) -> tuple[Normalizer, str]:
    """Whisper's English normaliser and its name; with ``spelling_map``, its spelling map when
    one is installed (whisper_normalizer's or openai-whisper's ``english.json``)."""
    from transformers.models.whisper.english_normalizer import EnglishTextNormalizer

    if spelling_map:
        for pkg in ("whisper_normalizer", "whisper"):
            try:
                path = importlib.resources.files(pkg) / "normalizers" / "english.json"
                mapping = json.loads(path.read_text(encoding="utf-8"))
                return EnglishTextNormalizer(mapping), f"EnglishTextNormalizer ({pkg} english.json)"
            except (ModuleNotFoundError, FileNotFoundError, OSError):
                continue
    name = "no spelling map installed" if spelling_map else "no spelling map"
    return EnglishTextNormalizer({}), f"EnglishTextNormalizer ({name})"


def words(norm: Normalizer, text: str) -> list[str]:
    """``text``'s normalised words (none for a blank text)."""
    return str(norm(text)).split() if text.strip() else []
