"""The cue policy of subtitle files: how a final becomes SRT/WebVTT cues.

Lines of at most `CueStyle.width` characters (and `CueStyle.words` words), at most
`CueStyle.lines` per cue, laid out by `streamcap.cue_layout` (whole words, the fewest lines,
breaks at sentence ends where they cost no line), each cut timed by the words, no cue shorter
than a millisecond; with `CueStyle.highlight`, a cue per word as openai-whisper's
``--highlight-words`` writes them. Pure text and numbers: writing the files is
`streamcap.formats`' job, with the `srt` and `webvtt-py` libraries.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from streamcap.core.decode_types import WordTiming
from streamcap.cue_layout import LINE_WIDTH, MAX_LINES, layout_cues

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
    whisper's ``SubtitlesWriter`` writes them); `words` is ``--max-words-per-line`` (None: as
    many as fit the width)."""

    width: int = LINE_WIDTH
    lines: int = MAX_LINES
    highlight: bool = False
    words: int | None = None

    def __post_init__(self) -> None:
        if self.width < 1 or self.lines < 1 or (self.words is not None and self.words < 1):
            raise ValueError(f"cue width, line and word counts must be >= 1, got {self}")


#: The cue policy unless told otherwise.
DEFAULT_CUES = CueStyle()


def ms(seconds: float) -> int:
    """Whole milliseconds, negative times clamped to zero (what both formats write); a time
    that is not a number (NaN) is zero and one beyond `MAX_TIME_S` (infinity) is that, so a
    broken time costs a cue its place, never the file."""
    if seconds != seconds:  # NaN
        return 0
    return round(min(max(seconds, 0.0), MAX_TIME_S) * 1000)


def split_cues(
    text: str,
    start: float,
    end: float,
    width: int = LINE_WIDTH,
    max_lines: int = MAX_LINES,
    words: Sequence[WordTiming] = (),
    max_words: int | None = None,
) -> list[Cue]:
    """Cut one final into cues of at most `max_lines` lines, timed by its words if given, else
    in proportion to characters.

    The lines are `layout_cues`': as full as the words allow, breaking at sentence ends where
    that costs no line. With ``words`` (their times on the same clock as `start`, their text
    that of the final), each cut lies where the words say: a cue ends with its last word, the
    next starts with its first (a pause shorter than `CUE_GAP_S` is closed); the first cue
    still starts at `start` and the last ends at `end`. Without them (or when they do not
    spell the text), characters are the best proxy for when each part was said. No cue is
    shorter than the files' millisecond (`_at_least_a_ms`).
    """
    planned = plan_cues(text, start, end, width, max_lines, words, max_words)
    return [(t0, t1, lines) for t0, t1, lines, _ in planned]


#: A planned cue: span, lines, and the word (index into the final's words) of each of its
#: non-space characters, or None when the words do not spell the text.
PlannedCue = tuple[float, float, list[str], "list[int] | None"]


def plan_cues(
    text: str,
    start: float,
    end: float,
    width: int,
    max_lines: int,
    words: Sequence[WordTiming],
    max_words: int | None = None,
) -> list[PlannedCue]:
    groups = layout_cues(text, width, max_lines, max_words)
    if not groups:
        return []
    end = max(end, start)
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
    timed = _at_least_a_ms(timed, start, end)
    return [
        (t0, t1, g, owners[k] if owners is not None else None)
        for k, ((t0, t1), g) in enumerate(zip(timed, groups, strict=True))
    ]


def _at_least_a_ms(
    spans: list[tuple[float, float]], start: float, end: float
) -> list[tuple[float, float]]:
    """`spans` (in order) with none empty at the files' resolution: a cue that rounds to no
    millisecond (words timed on top of each other, a final shorter than its cues: a player
    drops such a cue, or a reader chokes on it) takes its millisecond from the time after it,
    and the final's span grows by what it lacks. Spans that are fine are left as they are."""
    bounds = [(ms(t0), ms(t1)) for t0, t1 in spans]
    if all(a < b for a, b in bounds) and all(
        b <= a for (_, b), (a, _) in zip(bounds, bounds[1:], strict=False)
    ):
        return spans
    n = len(spans)
    hi = max(ms(end), ms(start) + n)
    out: list[tuple[float, float]] = []
    prev = ms(start)
    for k, (a, b) in enumerate(bounds):
        a = min(max(a, prev), hi - (n - k))  # room for this cue and the ones after it
        b = min(max(b, a + 1), hi - (n - k - 1))
        out.append((a / 1000, b / 1000))
        prev = b
    return out


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
        w1 = min(max(words[k].end, w0 + 0.001), t1)  # a word timed as no time gets a ms
        if ms(w1) <= ms(w0):  # no time left in the cue: the word is not underlined
            continue
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
