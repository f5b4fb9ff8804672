"""The cue policy of subtitle files: how a final becomes SRT/WebVTT cues.

Lines of at most `CueStyle.width` characters, at most `CueStyle.lines` per cue, cuts at
sentence ends (the one sentence rule, `core.text.ends_sentence`), each cut timed by the
words; with `CueStyle.highlight`, a cue per word as openai-whisper's ``--highlight-words``
writes them. Pure text and numbers: writing the files is `streamcap.formats`' job, with the
`srt` and `webvtt-py` libraries.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from streamcap.core.decode_types import WordTiming
from streamcap.core.text import ends_sentence

#: Common subtitle guidance: ~42 characters per line, at most 2 lines on screen.
LINE_WIDTH = 42
MAX_LINES = 2
#: A pause between two cues of one final shorter than this is closed (no blink off screen).
CUE_GAP_S = 0.5
#: The latest time written (31 years of audio): what a time beyond it is clamped to.
MAX_TIME_S = 1e9

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


def ms(seconds: float) -> int:
    """Whole milliseconds, negative times clamped to zero (what both formats write); a time
    that is not a number (NaN) is zero and one beyond `MAX_TIME_S` (infinity) is that, so a
    broken time costs a cue its place, never the file."""
    if seconds != seconds:  # NaN
        return 0
    return round(min(max(seconds, 0.0), MAX_TIME_S) * 1000)


def wrap_text(text: str, width: int = LINE_WIDTH) -> list[str]:
    """Greedy word wrap; a word longer than `width` is cut (a URL must not overflow the screen).

    Linear in the text: a long word is cut by index, each piece sliced once (slicing off the
    rest of the word per line was quadratic: a 2 MB word in a corrupt recording took 8 s)."""
    lines: list[str] = []
    line = ""
    for word in text.split():
        if len(word) > width:
            if line:
                lines.append(line)
                line = ""
            whole = (len(word) - 1) // width * width  # the last piece (1..width) goes on
            lines.extend(word[i : i + width] for i in range(0, whole, width))
            word = word[whole:]
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


def sentences(text: str) -> list[str]:
    """`text` cut after each sentence end, whitespace normalised.

    The sentence rule is the commit policy's (`core.text.ends_sentence`), with two cue-only
    readings: a next word in lower case carries the sentence on (`"Yes!" e.g. this.` is one
    line's worth), and "…" reads as "...".
    """
    words = text.split()
    out: list[str] = []
    current: list[str] = []
    for i, word in enumerate(words):
        current.append(word)
        following = words[i + 1] if i + 1 < len(words) else None
        if following is not None and following[:1].islower():
            continue
        if ends_sentence(word.replace("\u2026", "..."), following):
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
        (t0, t1, lines) for t0, t1, lines, _ in plan_cues(text, start, end, width, max_lines, words)
    ]


#: A planned cue: span, lines, and the word (index into the final's words) of each of its
#: non-space characters, or None when the words do not spell the text.
PlannedCue = tuple[float, float, list[str], "list[int] | None"]


def plan_cues(
    text: str, start: float, end: float, width: int, max_lines: int, words: Sequence[WordTiming]
) -> list[PlannedCue]:
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


def highlighted_cues(
    cue: PlannedCue, words: Sequence[WordTiming], escape: Callable[[str], str]
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
        if ms(w0) > ms(last):
            out.append((last, w0, plain))
        out.append((w0, w1, _underline(lines, owners, k, escape)))
        last = w1
    if ms(t1) > ms(last):
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


def vtt_escape(line: str) -> str:
    # "-->" cannot appear in a cue payload and "<" / "&" start markup: escape them.
    return line.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def as_is(line: str) -> str:
    return line
