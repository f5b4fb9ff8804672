"""Subtitle and transcript files: SRT, WebVTT, JSONL, TXT and openai-whisper's JSON.

The cue policy is ours (`streamcap.cues`: line width and count, cuts at sentence ends, timed by
the words); writing SRT and WebVTT is the `srt` and `webvtt-py` libraries' job. Writers keep
only finals (finals are never revised, so a file can be appended to as they arrive, and a crash
or Ctrl-C leaves a valid file with everything so far). An appending writer keeps arrival order;
`render_srt` / `render_vtt` / `render_txt` (whole documents, e.g. a room's ``/streams/ID.srt``)
sort by start time, since a room's finals arrive in the order speech ended.
"""

from __future__ import annotations

import io
import json
import os
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, TextIO

import srt  # type: ignore[import-untyped]  # the library ships no type hints
import webvtt
from webvtt.models import Timestamp

from streamcap.core.captions import Caption
from streamcap.cues import (
    DEFAULT_CUES,
    Cue,
    CueStyle,
    as_is,
    highlighted_cues,
    ms,
    plan_cues,
    vtt_escape,
)

# --------------------------------------------------------------------------- times


def format_srt_time(seconds: float) -> str:
    """`00:01:02,345` (negative times clamp to zero)."""
    return srt.timedelta_to_srt_timestamp(timedelta(milliseconds=ms(seconds)))


def format_vtt_time(seconds: float) -> str:
    """`00:01:02.345` (negative times clamp to zero)."""
    return str(Timestamp.from_seconds(ms(seconds) / 1000))


# --------------------------------------------------------------------------- writers


@dataclass(frozen=True)
class Decoded:
    """What openai-whisper's JSON says of a segment beyond its caption: the decode behind it."""

    text: str  # as the tokens spell it (Whisper's leading space kept)
    tokens: tuple[int, ...]
    avg_logprob: float | None
    no_speech_prob: float
    language: str
    seek: int  # the decoded window's first frame (100 per second), as whisper counts it


class CaptionWriter:
    """Base writer: appends each caption as it arrives and flushes, so a crash loses nothing.

    Takes an open text file (not closed by us) or a path (created/truncated, closed by us).
    """

    def __init__(self, target: TextIO | str | os.PathLike[str]) -> None:
        if isinstance(target, (str, os.PathLike)):
            self._file: TextIO = open(target, "w", encoding="utf-8", newline="\n")  # noqa: SIM115
            self._owns = True
        else:
            self._file = target
            self._owns = False
        self._closed = False
        self._begin()

    def _begin(self) -> None:
        """Write any header (VTT)."""

    def _format(self, caption: Caption, decoded: Decoded | None) -> str:
        raise NotImplementedError

    def _wants(self, caption: Caption) -> bool:
        return caption.type == "final" and bool(caption.text.strip())

    def write(self, caption: Caption, decoded: Decoded | None = None) -> None:
        """Append one caption (partials and empty finals are skipped) and flush; `decoded` is
        the decode it came from, where the format has room for it (JSON)."""
        if self._closed:
            raise ValueError("write to a closed caption writer")
        if not self._wants(caption):
            return
        self._file.write(self._format(caption, decoded))
        self._file.flush()

    def write_all(self, captions: Iterable[Caption]) -> None:
        for c in captions:
            self.write(c)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            if self._owns:
                self._file.close()

    def __enter__(self) -> CaptionWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _SubtitleWriter(CaptionWriter):
    """SRT and WebVTT: a final's cues by the `CueStyle`, each written by its library."""

    escape: Callable[[str], str] = staticmethod(as_is)

    def __init__(
        self, target: TextIO | str | os.PathLike[str], style: CueStyle = DEFAULT_CUES
    ) -> None:
        self.style = style
        super().__init__(target)

    def cues(self, caption: Caption) -> list[tuple[list[Cue], str]]:
        """The caption's cues (several per policy cue with highlighting) and its speaker."""
        s = self.style
        c = caption
        planned = plan_cues(c.text, c.start, c.end, s.width, s.lines, c.words)
        if s.highlight:
            return [(highlighted_cues(p, c.words, self.escape), c.speaker) for p in planned]
        return [([(t0, t1, [self.escape(x) for x in lines])], c.speaker)
                for t0, t1, lines, _ in planned]  # fmt: skip

    def _cue(self, cues: list[Cue], speaker: str) -> str:
        raise NotImplementedError

    def _format(self, caption: Caption, decoded: Decoded | None) -> str:
        return "".join(self._cue(c, speaker) for c, speaker in self.cues(caption))


class SrtWriter(_SubtitleWriter):
    """SubRip (the `srt` library): numbered cues; "Name: " leads a cue when the caption says
    who spoke and the speaker is not the previous cue's (a continuation cue of the same speaker
    goes without it; with highlighting, every word's cue of a named cue is named)."""

    def __init__(
        self, target: TextIO | str | os.PathLike[str], style: CueStyle = DEFAULT_CUES
    ) -> None:
        self._index = 0
        self._speaker = ""  # whose words the previous cue was
        super().__init__(target, style)

    def _cue(self, cues: list[Cue], speaker: str) -> str:
        name = f"{speaker}: " if speaker and speaker != self._speaker else ""  # no voice markup
        self._speaker = speaker
        out = []
        for t0, t1, lines in cues:
            self._index += 1
            start, end = (timedelta(milliseconds=ms(t)) for t in (t0, t1))
            out.append(srt.Subtitle(self._index, start, end, name + "\n".join(lines)).to_srt())
        return "".join(out)


class VttWriter(_SubtitleWriter):
    """WebVTT (`webvtt-py`): text escaped for cue payloads, a ``<v Name>`` voice span on every
    cue of a caption that says who spoke (a voice span belongs to its cue: players show or
    style the name per cue, so it is not left off on continuation cues)."""

    escape = staticmethod(vtt_escape)

    def _begin(self) -> None:
        self._file.write("WEBVTT\n\n")
        self._file.flush()

    def _cue(self, cues: list[Cue], speaker: str) -> str:
        voice = f"<v {vtt_escape(speaker)}>" if speaker else ""
        doc = webvtt.WebVTT(captions=[
            webvtt.Caption(format_vtt_time(t0), format_vtt_time(t1), [voice + lines[0], *lines[1:]])
            for t0, t1, lines in cues
        ])  # fmt: skip
        return doc.content.removeprefix("WEBVTT\n\n") + "\n"


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
        segment: dict[str, Any] = {
            "id": self._segments, "seek": decoded.seek, "start": round(caption.start, 3),
            "end": round(caption.end, 3), "text": text,
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


_WRITERS: dict[str, type[CaptionWriter]] = {
    "srt": SrtWriter, "vtt": VttWriter, "jsonl": TranscriptJsonlWriter, "txt": TxtWriter,
    "json": WhisperJsonWriter,
}  # fmt: skip

#: The caption file formats, by name (the file suffix without its dot).
FORMATS: tuple[str, ...] = tuple(_WRITERS)
#: The formats a stream of captions can be written to as it goes (whisper's JSON also needs
#: each final's decode: offline transcription only).
STREAM_FORMATS: tuple[str, ...] = tuple(f for f in FORMATS if f != "json")
#: The formats `CueStyle` applies to.
SUBTITLE_FORMATS: tuple[str, ...] = ("srt", "vtt")


def format_of(path: str | os.PathLike[str]) -> str | None:
    """The format a file name asks for (by suffix, any case), or None if it names none."""
    name = Path(path).suffix.lower().lstrip(".")
    return name if name in _WRITERS else None


def open_writer(
    path: str | os.PathLike[str], *, include_partials: bool = False, style: CueStyle = DEFAULT_CUES
) -> CaptionWriter:
    """Writer chosen by the file suffix; `include_partials` applies to .jsonl only, `style` to
    .srt and .vtt."""
    fmt = format_of(path)
    if fmt is None:
        suffix = Path(path).suffix.lower()
        raise ValueError(
            f"unsupported caption file type {suffix or '(no suffix)'!r} for {os.fspath(path)!r}: "
            f"use {', '.join('.' + f for f in FORMATS)}"
        )
    cls = _WRITERS[fmt]
    if issubclass(cls, JsonlWriter):
        return cls(path, include_partials=include_partials)
    if issubclass(cls, _SubtitleWriter):
        return cls(path, style)
    return cls(path)


def _in_time_order(captions: Iterable[Caption]) -> list[Caption]:
    """The finals worth writing, by start time; equal starts keep their order (stable). A
    room's finals arrive in the order speech *ended*, so a long turn that began first comes
    after a short one said inside it."""
    return sorted(
        (c for c in captions if c.type == "final" and c.text.strip()), key=lambda c: c.start
    )


def _render_cues(writer: _SubtitleWriter, captions: Iterable[Caption]) -> str:
    """Every cue of the finals among `captions`, sorted by start time (stable), with its
    speaker: cues of overlapping finals interleave by when they were said."""
    cues = [cue for c in _in_time_order(captions) for cue in writer.cues(c)]
    for cue in sorted(cues, key=lambda cue: cue[0][0][0]):
        writer._file.write(writer._cue(*cue))
    return writer._file.getvalue()  # type: ignore[attr-defined]


def render_srt(captions: Iterable[Caption]) -> str:
    """Whole SRT document for the finals among `captions`, cues in time order."""
    return _render_cues(SrtWriter(io.StringIO()), captions)


def render_vtt(captions: Iterable[Caption]) -> str:
    """Whole WebVTT document for the finals among `captions`, cues in time order."""
    return _render_cues(VttWriter(io.StringIO()), captions)


def render_txt(captions: Iterable[Caption]) -> str:
    """Whole plain transcript for the finals among `captions`, in order of their start."""
    buf = io.StringIO()
    TxtWriter(buf).write_all(_in_time_order(captions))
    return buf.getvalue()
