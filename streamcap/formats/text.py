"""Plain text: one final per line, "Name: " where the speaker changes."""

from __future__ import annotations

import io
import os
from collections.abc import Iterable
from typing import TextIO

from streamcap.core.captions import Caption
from streamcap.formats.base import CaptionWriter, Decoded, in_time_order

__all__ = ["TxtWriter", "render_txt"]


class TxtWriter(CaptionWriter):
    """Plain transcript: one final per line, whitespace normalised, "Name: " first when the
    caption says who spoke and the speaker is not the previous line's."""

    def __init__(self, target: TextIO | str | os.PathLike[str]) -> None:
        self._speaker = ""
        super().__init__(target)

    def _format(self, caption: Caption, decoded: Decoded | None) -> str:
        text = " ".join(caption.text.split())
        name = caption.speaker if caption.speaker != self._speaker else ""
        self._speaker = caption.speaker
        return f"{name}: {text}\n" if name else text + "\n"


def render_txt(captions: Iterable[Caption]) -> str:
    """Whole plain transcript for the finals among `captions`, in order of their start."""
    buf = io.StringIO()
    TxtWriter(buf).write_all(in_time_order(captions))
    return buf.getvalue()
