"""Subtitle and transcript files: SRT, WebVTT, JSONL and TXT writers for caption events.

Writers keep only finals (finals are never revised, so a file can be appended to as they
arrive, and a crash or Ctrl-C leaves a valid file with everything so far). An appending writer
keeps arrival order; `render_srt` / `render_vtt` / `render_txt` (whole documents, e.g. a room's
``/streams/ID.srt``) sort by start time, since a room's finals arrive in the order speech ended.
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TextIO

from streamcap.core.captions import Caption
from streamcap.decoding.options import WordTiming

#: Common subtitle guidance: ~42 characters per line, at most 2 lines on screen.
LINE_WIDTH = 42
MAX_LINES = 2
#: A pause between two cues of one final shorter than this is closed (no blink off screen).
CUE_GAP_S = 0.5


# --------------------------------------------------------------------------- formatting


def _split_ms(seconds: float) -> tuple[int, int, int, int]:
    ms = max(0, round(seconds * 1000))
    h, ms = divmod(ms, 3_600_000)
    m, ms = divmod(ms, 60_000)
    s, ms = divmod(ms, 1000)
    return h, m, s, ms


def format_srt_time(seconds: float) -> str:
    """`00:01:02,345` (negative times clamp to zero)."""
    h, m, s, ms = _split_ms(seconds)
    return f"{h:02d}:{m:02d}:{s:02d},{ms:03d}"


def format_vtt_time(seconds: float) -> str:
    """`00:01:02.345` (negative times clamp to zero)."""
    h, m, s, ms = _split_ms(seconds)
    return f"{h:02d}:{m:02d}:{s:02d}.{ms:03d}"


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
) -> list[tuple[float, float, list[str]]]:
    """Cut one final into cues of at most `max_lines` lines, timed by its words if given, else
    in proportion to characters.

    A final too long for one cue breaks at sentence ends first (as live finals do), then evenly
    by characters within a sentence. With ``words`` (their times on the same clock as `start`,
    their text that of the final), each cut lies where the words say: a cue ends with its last
    word, the next starts with its first (a pause shorter than `CUE_GAP_S` is closed); the first
    cue still starts at `start` and the last ends at `end`. Without them (or when they do not
    spell the text), characters are the best proxy for when each part was said.
    """
    lines = wrap_text(text, width)
    if not lines:
        return []
    end = max(end, start)
    groups = [lines] if len(lines) <= max_lines else _sentence_groups(text, width, max_lines)
    sizes = [sum(len(x) for x in g) + len(g) - 1 for g in groups]
    timed = _word_cuts(groups, words, start, end) if len(groups) > 1 and words else None
    if timed is not None:
        return [(t0, t1, _balance(g)) for (t0, t1), g in zip(timed, groups, strict=True)]
    total = sum(sizes)
    cues: list[tuple[float, float, list[str]]] = []
    done = 0
    for group, size in zip(groups, sizes, strict=True):
        t0 = start + (end - start) * done / total
        done += size
        t1 = start + (end - start) * done / total
        cues.append((t0, t1, _balance(group)))
    return cues


def _word_cuts(
    groups: list[list[str]], words: Sequence[WordTiming], start: float, end: float
) -> list[tuple[float, float]] | None:
    """Each cue's span from the words (matched to the cues by their non-space characters), or
    None if the words do not spell the cues' text."""
    ink = ["".join(w.word.split()) for w in words]
    if "".join(ink) != "".join("".join(x.split()) for g in groups for x in g):
        return None
    owner: list[int] = [k for k, chars in enumerate(ink) for _ in chars]  # word of each char
    spans: list[tuple[float, float]] = []
    done = 0
    for g in groups:
        n = sum(len("".join(x.split())) for x in g)
        first, last = words[owner[done]], words[owner[done + n - 1]]
        spans.append((first.start, last.end))
        done += n
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


def _cues(caption: Caption) -> list[tuple[float, float, list[str]]]:
    """A final's cues, by its words where it has them (``Caption.words``)."""
    return split_cues(caption.text, caption.start, caption.end, words=caption.words)


def _vtt_escape(line: str) -> str:
    # "-->" cannot appear in a cue payload and "<" / "&" start markup: escape them.
    return line.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


# --------------------------------------------------------------------------- writers


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

    def _format(self, caption: Caption) -> str:
        raise NotImplementedError

    def _wants(self, caption: Caption) -> bool:
        return caption.type == "final" and bool(caption.text.strip())

    def write(self, caption: Caption) -> None:
        """Append one caption (partials and empty finals are skipped) and flush."""
        if self._closed:
            raise ValueError("write to a closed caption writer")
        if not self._wants(caption):
            return
        self._file.write(self._format(caption))
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


class SrtWriter(CaptionWriter):
    """SubRip: numbered cues, `HH:MM:SS,mmm` times, blank line between cues; "Name: " leads
    a cue when the caption says who spoke and the speaker is not the previous cue's (a
    continuation cue of the same speaker goes without it)."""

    def __init__(self, target: TextIO | str | os.PathLike[str]) -> None:
        self._index = 0
        self._speaker = ""  # whose words the previous cue was
        super().__init__(target)

    def _cue(self, t0: float, t1: float, lines: list[str], speaker: str) -> str:
        self._index += 1
        body = "\n".join(lines)
        if speaker and speaker != self._speaker:  # SRT has no voice markup: the name leads
            body = f"{speaker}: {body}"
        self._speaker = speaker
        return f"{self._index}\n{format_srt_time(t0)} --> {format_srt_time(t1)}\n{body}\n\n"

    def _format(self, caption: Caption) -> str:
        return "".join(
            self._cue(t0, t1, lines, caption.speaker) for t0, t1, lines in _cues(caption)
        )


class VttWriter(CaptionWriter):
    """WebVTT: `WEBVTT` header, `HH:MM:SS.mmm` times, text escaped for cue payloads, a
    ``<v Name>`` voice span on every cue of a caption that says who spoke (a voice span
    belongs to its cue: players show or style the name per cue, so it is not left off on
    continuation cues)."""

    def _begin(self) -> None:
        self._file.write("WEBVTT\n\n")
        self._file.flush()

    def _cue(self, t0: float, t1: float, lines: list[str], speaker: str) -> str:
        body = "\n".join(_vtt_escape(x) for x in lines)
        if speaker:
            body = f"<v {_vtt_escape(speaker)}>{body}"
        return f"{format_vtt_time(t0)} --> {format_vtt_time(t1)}\n{body}\n\n"

    def _format(self, caption: Caption) -> str:
        return "".join(
            self._cue(t0, t1, lines, caption.speaker) for t0, t1, lines in _cues(caption)
        )


class JsonlWriter(CaptionWriter):
    """One wire-format event per line; the lossless log (partials too if asked)."""

    def __init__(
        self, target: TextIO | str | os.PathLike[str], *, include_partials: bool = False
    ) -> None:
        self.include_partials = include_partials
        super().__init__(target)

    def _wants(self, caption: Caption) -> bool:
        return self.include_partials or caption.type == "final"

    def _format(self, caption: Caption) -> str:
        return caption.to_json() + "\n"


class TxtWriter(CaptionWriter):
    """Plain transcript: one final per line, whitespace normalised, "Name: " first when the
    caption says who spoke and the speaker is not the previous line's."""

    def __init__(self, target: TextIO | str | os.PathLike[str]) -> None:
        self._speaker = ""
        super().__init__(target)

    def _format(self, caption: Caption) -> str:
        text = " ".join(caption.text.split())
        name = caption.speaker if caption.speaker != self._speaker else ""
        self._speaker = caption.speaker
        return f"{name}: {text}\n" if name else text + "\n"


_WRITERS: dict[str, type[CaptionWriter]] = {
    "srt": SrtWriter, "vtt": VttWriter, "jsonl": JsonlWriter, "txt": TxtWriter
}  # fmt: skip

#: The caption file formats, by name (the file suffix without its dot).
FORMATS: tuple[str, ...] = tuple(_WRITERS)


def format_of(path: str | os.PathLike[str]) -> str | None:
    """The format a file name asks for (by suffix, any case), or None if it names none."""
    name = Path(path).suffix.lower().lstrip(".")
    return name if name in _WRITERS else None


def open_writer(path: str | os.PathLike[str], *, include_partials: bool = False) -> CaptionWriter:
    """Writer chosen by the file suffix; `include_partials` applies to .jsonl only."""
    fmt = format_of(path)
    if fmt is None:
        suffix = Path(path).suffix.lower()
        raise ValueError(
            f"unsupported caption file type {suffix or '(no suffix)'!r} for {os.fspath(path)!r}: "
            "use .srt, .vtt, .jsonl or .txt"
        )
    cls = _WRITERS[fmt]
    if cls is JsonlWriter:
        return JsonlWriter(path, include_partials=include_partials)
    return cls(path)


def _in_time_order(captions: Iterable[Caption]) -> list[Caption]:
    """The finals worth writing, by start time; equal starts keep their order (stable). A
    room's finals arrive in the order speech *ended*, so a long turn that began first comes
    after a short one said inside it."""
    return sorted(
        (c for c in captions if c.type == "final" and c.text.strip()), key=lambda c: c.start
    )


def _timed_cues(captions: Iterable[Caption]) -> list[tuple[float, float, list[str], str]]:
    """Every cue of the finals among `captions`, sorted by start time (stable), with its
    speaker: cues of overlapping finals interleave by when they were said."""
    cues = [
        (t0, t1, lines, c.speaker) for c in _in_time_order(captions) for t0, t1, lines in _cues(c)
    ]
    return sorted(cues, key=lambda cue: cue[0])


def _render_cues(
    writer_type: type[SrtWriter] | type[VttWriter], captions: Iterable[Caption]
) -> str:
    buf = io.StringIO()
    writer = writer_type(buf)
    for cue in _timed_cues(captions):
        buf.write(writer._cue(*cue))
    return buf.getvalue()


def render_srt(captions: Iterable[Caption]) -> str:
    """Whole SRT document for the finals among `captions`, cues in time order."""
    return _render_cues(SrtWriter, captions)


def render_vtt(captions: Iterable[Caption]) -> str:
    """Whole WebVTT document for the finals among `captions`, cues in time order."""
    return _render_cues(VttWriter, captions)


def render_txt(captions: Iterable[Caption]) -> str:
    """Whole plain transcript for the finals among `captions`, in order of their start."""
    buf = io.StringIO()
    TxtWriter(buf).write_all(_in_time_order(captions))
    return buf.getvalue()
