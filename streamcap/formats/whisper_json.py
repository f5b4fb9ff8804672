"""openai-whisper's JSON (``-f json``): the result its own writers read."""

from __future__ import annotations

import json
import zlib
from typing import Any

from streamcap.core.captions import Caption
from streamcap.formats.base import CaptionWriter, Decoded, spoken_span

__all__ = ["WhisperJsonWriter"]


class WhisperJsonWriter(CaptionWriter):
    """openai-whisper's ``-f json`` (its `transcribe` result): ``text``, ``language`` and
    ``segments[{id, seek, start, end, text, tokens, temperature, avg_logprob,
    compression_ratio, no_speech_prob, words[{word, start, end, probability}]}]``, words
    with their leading space as whisper writes them, ``speaker`` on a segment when known (as
    whisperX adds it). One JSON document cannot be appended to, so after each final the file
    is rewritten from the end of the last segment: a valid document with every final so far.
    Needs a seekable target and each final's `Decoded`."""

    def _begin(self) -> None:
        self._segments = 0
        self._text: list[str] = []
        self._language = ""
        self._file.write('{"segments": [')
        self._body_end = self._file.tell()
        self._file.write(self._tail())
        self._file.flush()

    def _tail(self) -> str:
        text = json.dumps("".join(self._text), ensure_ascii=False)
        return f'], "text": {text}, "language": {json.dumps(self._language or None)}}}\n'

    def _format(self, caption: Caption, decoded: Decoded | None) -> str:
        if decoded is None:
            raise ValueError("whisper's JSON needs each final's decode (offline transcription)")
        whole = decoded.text.strip() == caption.text.strip()  # else a part of it (a speaker's)
        text = decoded.text if whole else f" {caption.text}"
        start, end = spoken_span(caption)  # whisper's bounds: the words', not the silence's
        segment: dict[str, Any] = {
            "id": self._segments, "seek": decoded.seek, "start": round(start, 3),
            "end": round(end, 3), "text": text,
            "tokens": list(decoded.tokens) if whole else [], "temperature": 0.0,  # greedy
            "avg_logprob": decoded.avg_logprob,
            "compression_ratio": _compression_ratio(text), "no_speech_prob": decoded.no_speech_prob,
        }  # fmt: skip
        if caption.words:
            segment["words"] = [w.as_dict() for w in caption.words]
        if caption.speaker:
            segment["speaker"] = caption.speaker
        self._language = self._language or decoded.language
        self._text.append(text)
        self._file.seek(self._body_end)
        self._file.truncate()
        lead = ", " if self._segments else ""
        self._segments += 1
        self._file.write(lead + json.dumps(segment, ensure_ascii=False))
        self._body_end = self._file.tell()
        return self._tail()


def _compression_ratio(text: str) -> float:
    """Whisper's gzip compression ratio of a segment's text (its repetition check)."""
    data = text.encode("utf-8")
    return round(len(data) / len(zlib.compress(data)), 4) if data else 0.0
