"""Subtitle and transcript files: SRT, WebVTT, JSONL, TXT and openai-whisper's JSON.

The cue policy is ours (lines of at most `CueStyle.width` characters, at most `CueStyle.lines`
per cue, cuts at sentence ends, timed by the words); writing SRT and WebVTT is the `srt` and
`webvtt-py` libraries' job. Writers keep only finals (finals are never revised, so a file can
be appended to as they arrive, and a crash or Ctrl-C leaves a valid file with everything so
far). An appending writer keeps arrival order; `render_srt` / `render_vtt` / `render_txt`
(whole documents, e.g. a room's ``/streams/ID.srt``) sort by start time, since a room's
finals arrive in the order speech ended.
"""

from __future__ import annotations

import io
import json
import os
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, TextIO

import srt  # type: ignore[import-untyped]  # the library ships no type hints
import webvtt
from webvtt.models import Timestamp

from streamcap.core.captions import Caption
from streamcap.decoding.options import WordTiming

#: Common subtitle guidance: ~42 characters per line, at most 2 lines on screen.
LINE_WIDTH = 42
MAX_LINES = 2
#: A pause between two cues of one final shorter than this is closed (no blink off screen).
CUE_GAP_S = 0.5

#: A cue: its span and its lines.
Cue = tuple[float, float, list[str]]


@dataclass(frozen=True)
class CueStyle:
    """How finals become cues, under openai-whisper's option names: `width` is
    ``--max-line-width`` (characters in a line before it breaks), `lines` is
    ``--max-line-count`` (lines in a cue before a new cue starts) and `highlight` is
    ``--highlight-words`` (each word underlined while it is said: one cue per word, as
    whisper's ``SubtitlesWriter`` writes them)."""

    width: int = LINE_WIDTH
    lines: int = MAX_LINES
    highlight: bool = False

    def __post_init__(self) -> None:
        if self.width < 1 or self.lines < 1:
            raise ValueError(f"cue width and line count must be >= 1, got {self}")


#: The cue policy unless told otherwise.
DEFAULT_CUES = CueStyle()


# --------------------------------------------------------------------------- formatting


def format_srt_time(seconds: float) -> str:
    """`00:01:02,345` (negative times clamp to zero)."""
    return srt.timedelta_to_srt_timestamp(timedelta(milliseconds=_ms(seconds)))


def format_vtt_time(seconds: float) -> str:
    """`00:01:02.345` (negative times clamp to zero)."""
    return str(Timestamp.from_seconds(_ms(seconds) / 1000))


def _ms(seconds: float) -> int:
    return max(0, round(seconds * 1000))


def wrap_text(text: str, width: int = LINE_WIDTH) -> list[str]:
    """Greedy word wrap; a word longer than `width` is cut (a URL must not overflow the screen)."""
    lines: list[str] = []
    line = ""
    for word in text.split():
        while len(word) > width:
            if line:
                lines.append(line)
                line = ""
            lines.append(word[:width])
            word = word[width:]
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    if line:
        lines.append(line)
    return lines


def _balance(lines: list[str]) -> list[str]:
    """Re-split two lines at the word boundary that makes them most even (easier to read)."""
    if len(lines) != 2:
        return lines
    words = " ".join(lines).split()
    best = lines
    best_len = max(len(x) for x in lines)
    for i in range(1, len(words)):
        a, b = " ".join(words[:i]), " ".join(words[i:])
        if max(len(a), len(b)) < best_len:
            best, best_len = [a, b], max(len(a), len(b))
    return best


def _even_groups(lines: list[str], width: int, max_lines: int) -> list[list[str]]:
    """Group wrapped lines into cues, evening out cue lengths so no cue is a stray word."""
    greedy = [lines[i : i + max_lines] for i in range(0, len(lines), max_lines)]
    n = len(greedy)
    if n < 2:
        return greedy
    words = " ".join(lines).split()
    total = sum(len(w) + 1 for w in words)
    chunks: list[list[str]] = [[]]
    done = 0
    for w in words:
        if chunks[-1] and len(chunks) < n and done + (len(w) + 1) / 2 > total * len(chunks) / n:
            chunks.append([])
        chunks[-1].append(w)
        done += len(w) + 1
    even = [wrap_text(" ".join(c), width) for c in chunks]
    if all(len(g) <= max_lines for g in even):
        return even
    return greedy


#: Closing marks that may follow a sentence's final punctuation ("Really?" he said.).
_CLOSERS = "\"'\u201d\u2019)]"
#: Words whose full stop is not a sentence end (compared lower-cased, without the stop).
_ABBREVIATIONS = frozenset({"mr", "mrs", "ms", "dr", "prof", "st", "sr", "jr", "vs", "etc"})


def _ends_sentence(word: str, following: str) -> bool:
    """True after . ? ! or … unless it is an abbreviation ("Mr.", "e.g.", an initial "J.")
    or the next word goes on in lower case."""
    if following[:1].islower():
        return False
    bare = word.rstrip(_CLOSERS)
    if not bare.endswith((".", "?", "!", "\u2026")):
        return False
    if bare.endswith(".") and not bare.endswith(".."):
        stem = bare[:-1].lstrip("\"'\u201c\u2018(").lower()
        if stem in _ABBREVIATIONS or len(stem) == 1 or "." in stem:
            return False
    return True


def sentences(text: str) -> list[str]:
    """`text` cut after each sentence end, whitespace normalised."""
    words = text.split()
    out: list[str] = []
    current: list[str] = []
    for i, word in enumerate(words):
        current.append(word)
        if _ends_sentence(word, words[i + 1] if i + 1 < len(words) else ""):
            out.append(" ".join(current))
            current = []
    if current:
        out.append(" ".join(current))
    return out


def _sentence_groups(text: str, width: int, max_lines: int) -> list[list[str]]:
    """Cues that end where sentences end: whole sentences are packed into a cue while they fit;
    a sentence too long for one cue is split evenly on its own, so no cue mixes the end of one
    sentence with the start of the next unless both fit in it whole."""
    groups: list[list[str]] = []
    current = ""
    for sentence in sentences(text):
        joined = f"{current} {sentence}" if current else sentence
        if len(wrap_text(joined, width)) <= max_lines:
            current = joined
            continue
        if current:
            groups.append(wrap_text(current, width))
        lines = wrap_text(sentence, width)
        if len(lines) <= max_lines:
            current = sentence
        else:
            groups.extend(_even_groups(lines, width, max_lines))
            current = ""
    if current:
        groups.append(wrap_text(current, width))
    return groups


def split_cues(
    text: str,
    start: float,
    end: float,
    width: int = LINE_WIDTH,
    max_lines: int = MAX_LINES,
    words: Sequence[WordTiming] = (),
) -> list[Cue]:
    """Cut one final into cues of at most `max_lines` lines, timed by its words if given, else
    in proportion to characters.

    A final too long for one cue breaks at sentence ends first (as live finals do), then evenly
    by characters within a sentence. With ``words`` (their times on the same clock as `start`,
    their text that of the final), each cut lies where the words say: a cue ends with its last
    word, the next starts with its first (a pause shorter than `CUE_GAP_S` is closed); the first
    cue still starts at `start` and the last ends at `end`. Without them (or when they do not
    spell the text), characters are the best proxy for when each part was said.
    """
    return [
        (t0, t1, lines) for t0, t1, lines, _ in _plan(text, start, end, width, max_lines, words)
    ]


#: A planned cue: span, lines, and the word (index into the final's words) of each of its
#: non-space characters, or None when the words do not spell the text.
_Planned = tuple[float, float, list[str], "list[int] | None"]


def _plan(
    text: str, start: float, end: float, width: int, max_lines: int, words: Sequence[WordTiming]
) -> list[_Planned]:
    lines = wrap_text(text, width)
    if not lines:
        return []
    end = max(end, start)
    groups = [lines] if len(lines) <= max_lines else _sentence_groups(text, width, max_lines)
    owners = _owners(groups, words) if words else None
    if owners is not None and len(groups) > 1:
        timed = _word_cuts(owners, words, start, end)
    elif owners is not None:
        timed = [(start, end)]
    else:
        sizes = [sum(len(x) for x in g) + len(g) - 1 for g in groups]
        total, done, timed = sum(sizes), 0, []
        for size in sizes:
            t0 = start + (end - start) * done / total
            done += size
            timed.append((t0, start + (end - start) * done / total))
    return [
        (t0, t1, _balance(g), owners[k] if owners is not None else None)
        for k, ((t0, t1), g) in enumerate(zip(timed, groups, strict=True))
    ]


def _owners(groups: list[list[str]], words: Sequence[WordTiming]) -> list[list[int]] | None:
    """Per cue, the word of each of its non-space characters (the words matched to the cues by
    their non-space characters), or None if the words do not spell the cues' text."""
    ink = ["".join(w.word.split()) for w in words]
    if "".join(ink) != "".join("".join(x.split()) for g in groups for x in g):
        return None
    owner = [k for k, chars in enumerate(ink) for _ in chars]
    out: list[list[int]] = []
    done = 0
    for g in groups:
        n = sum(len("".join(x.split())) for x in g)
        out.append(owner[done : done + n])
        done += n
    return out


def _word_cuts(
    owners: list[list[int]], words: Sequence[WordTiming], start: float, end: float
) -> list[tuple[float, float]]:
    """Each cue's span from its first and last word."""
    spans = [(words[o[0]].start, words[o[-1]].end) for o in owners]
    cues: list[tuple[float, float]] = []
    t0 = start
    for k, (_, w_end) in enumerate(spans):
        if k + 1 == len(spans):
            t1 = end
        else:
            following = spans[k + 1][0]
            t1 = following if following - w_end < CUE_GAP_S else w_end
        t1 = min(max(t1, t0), end)
        cues.append((t0, t1))
        if k + 1 < len(spans):
            t0 = min(max(spans[k + 1][0], t1), end)
    return cues


def _highlighted(
    cue: _Planned, words: Sequence[WordTiming], escape: Callable[[str], str]
) -> list[Cue]:
    """One cue as whisper's ``--highlight-words`` writes it: a cue per word with that word in
    ``<u>…</u>``, spanning the word's time, and the plain text over the gaps between words
    (and from the cue's start to its first word, from its last word to its end, so the text
    is on screen exactly as long as without highlighting)."""
    t0, t1, lines, owners = cue
    plain = [escape(x) for x in lines]
    if owners is None:
        return [(t0, t1, plain)]
    out: list[Cue] = []
    last = t0
    for k in dict.fromkeys(owners):
        w0 = min(max(words[k].start, last), t1)
        w1 = min(max(words[k].end, w0), t1)
        if _ms(w0) > _ms(last):
            out.append((last, w0, plain))
        out.append((w0, w1, _underline(lines, owners, k, escape)))
        last = w1
    if _ms(t1) > _ms(last):
        out.append((last, t1, plain))
    return out


def _underline(
    lines: list[str], owners: list[int], k: int, escape: Callable[[str], str]
) -> list[str]:
    """`lines` with the characters of word `k` in ``<u>…</u>`` (per line: a word cut over two
    lines is underlined on both)."""
    out: list[str] = []
    n = 0  # non-space characters seen
    for line in lines:
        runs: list[tuple[bool, str]] = []  # (underlined, text)
        for ch in line:
            mine = not ch.isspace() and owners[n] == k
            n += not ch.isspace()
            if runs and runs[-1][0] == mine:
                runs[-1] = (mine, runs[-1][1] + ch)
            else:
                runs.append((mine, ch))
        out.append("".join(f"<u>{escape(t)}</u>" if u else escape(t) for u, t in runs))
    return out


def _vtt_escape(line: str) -> str:
    # "-->" cannot appear in a cue payload and "<" / "&" start markup: escape them.
    return line.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _as_is(line: str) -> str:
    return line


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

    escape: Callable[[str], str] = staticmethod(_as_is)

    def __init__(
        self, target: TextIO | str | os.PathLike[str], style: CueStyle = DEFAULT_CUES
    ) -> None:
        self.style = style
        super().__init__(target)

    def cues(self, caption: Caption) -> list[tuple[list[Cue], str]]:
        """The caption's cues (several per policy cue with highlighting) and its speaker."""
        s = self.style
        planned = _plan(caption.text, caption.start, caption.end, s.width, s.lines, caption.words)
        if s.highlight:
            return [(_highlighted(p, caption.words, self.escape), caption.speaker) for p in planned]
        return [([(t0, t1, [self.escape(x) for x in lines])], caption.speaker)
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
            start, end = (timedelta(milliseconds=_ms(t)) for t in (t0, t1))
            out.append(srt.Subtitle(self._index, start, end, name + "\n".join(lines)).to_srt())
        return "".join(out)


class VttWriter(_SubtitleWriter):
    """WebVTT (`webvtt-py`): text escaped for cue payloads, a ``<v Name>`` voice span on every
    cue of a caption that says who spoke (a voice span belongs to its cue: players show or
    style the name per cue, so it is not left off on continuation cues)."""

    escape = staticmethod(_vtt_escape)

    def _begin(self) -> None:
        self._file.write("WEBVTT\n\n")
        self._file.flush()

    def _cue(self, cues: list[Cue], speaker: str) -> str:
        voice = f"<v {_vtt_escape(speaker)}>" if speaker else ""
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
