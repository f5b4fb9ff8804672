"""Tab-separated values (``-f tsv``): openai-whisper's ``WriteTSV``, a row per final.

``start<TAB>end<TAB>text`` under that header line, times in whole milliseconds (whisper's
reason: no locale can turn a decimal point into a comma, and C++ reads integers fastest), the
text on one line with no tab in it. A row's span is the words' (`base.spoken_span`), as
whisper's segments are when it times words. Rows are appended as finals come, so the file is
valid after each one; "Name: " leads a row whose speaker is not the previous row's, as in the
plain transcript (`text`).
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterable
from typing import TextIO

from streamcap.core.captions import Caption
from streamcap.cues import ms
from streamcap.formats.base import CaptionWriter, Decoded, in_time_order, spoken_span

__all__ = ["TsvWriter", "render_tsv"]


class TsvWriter(CaptionWriter):
    """openai-whisper's TSV: the header, then ``start``, ``end`` (integer milliseconds) and
    the text, whitespace (tabs and line breaks too) collapsed to single spaces."""

    def __init__(self, target: TextIO | str | os.PathLike[str]) -> None:
        self._speaker = ""
        super().__init__(target)

    def _begin(self) -> None:
        self._file.write("start\tend\ttext\n")
        self._file.flush()

    def _format(self, caption: Caption, decoded: Decoded | None) -> str:
        text = " ".join(caption.text.split())
        name = caption.speaker if caption.speaker != self._speaker else ""
        self._speaker = caption.speaker
        if name:
            text = f"{' '.join(name.split())}: {text}"
        start, end = spoken_span(caption)
        return f"{ms(start)}\t{ms(end)}\t{text}\n"


def render_tsv(captions: Iterable[Caption]) -> str:
    """Whole TSV document for the finals among `captions`, in order of their start."""
    buf = io.StringIO()
    TsvWriter(buf).write_all(in_time_order(captions))
    return buf.getvalue()
