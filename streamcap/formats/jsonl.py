"""JSONL: one caption event per line, as on the wire (the server's recording) or as a
transcription's finals."""

from __future__ import annotations

import json
import os
from typing import TextIO

from streamcap.core.captions import Caption
from streamcap.formats.base import CaptionWriter, Decoded

__all__ = ["WIRE_ONLY", "JsonlWriter", "TranscriptJsonlWriter"]


#: Fields of a wire event that mean nothing in a file (who sent it, in which order, how late).
WIRE_ONLY = ("stream", "seq", "epoch", "committed_chars", "latency_ms")


class JsonlWriter(CaptionWriter):
    """One wire-format event per line, exactly as sent: the server's lossless recording, read
    back after a restart (`server.record`), partials too if asked."""

    def __init__(
        self, target: TextIO | str | os.PathLike[str], *, include_partials: bool = False
    ) -> None:
        self.include_partials = include_partials
        super().__init__(target)

    def _wants(self, caption: Caption) -> bool:
        return self.include_partials or caption.type == "final"

    def _format(self, caption: Caption, decoded: Decoded | None) -> str:
        return caption.to_json() + "\n"


class TranscriptJsonlWriter(JsonlWriter):
    """A ``.jsonl`` file of a transcription: one final per line, as on the wire but without
    the `WIRE_ONLY` fields, and words without Whisper's leading space (``"word": "Today"``,
    as live words are)."""

    def _format(self, caption: Caption, decoded: Decoded | None) -> str:
        d = {k: v for k, v in caption.to_dict().items() if k not in WIRE_ONLY}
        if "words" in d:
            d["words"] = [{**w, "word": w["word"].strip()} for w in d["words"]]
        return json.dumps(d, ensure_ascii=False, separators=(",", ":")) + "\n"
