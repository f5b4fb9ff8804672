"""How a final's words become the lines of its cues: whole words, the fewest lines.

The layout half of the cue policy (`streamcap.cues` times the cues and writes nothing either):
lines of at most a width (and a word count), cues of at most a line count, as full as the
words allow (a final laid out one sentence per cue, then evened out, averaged 29 characters a
line where 42 were allowed on a real recording; issue 39), breaking at sentence ends, then
clauses, where that costs no line, never splitting a word (one longer than the width stands
alone on its line, as openai-whisper writes it) and never leaving a lone word on a line when
as many lines can avoid it. A search over the words (dynamic programming): fewest lines, then
fewest cues, then the breaks' badness, then even lines. Pure text.
"""

from __future__ import annotations

from streamcap.core.text import ends_sentence

#: Common subtitle guidance: ~42 characters per line, at most 2 lines on screen.
LINE_WIDTH = 42
MAX_LINES = 2


def wrap_text(text: str, width: int = LINE_WIDTH, max_words: int | None = None) -> list[str]:
    """Greedy word wrap: as many words on a line as fit in `width` characters (and at most
    `max_words`). A word is never split: one longer than `width` stands on its own line, as
    openai-whisper writes it (cutting it made a subtitle of half-words, red team round 4).
    Linear in the text."""
    lines: list[str] = []
    line: list[str] = []
    size = 0
    for word in text.split():
        full = max_words is not None and len(line) >= max_words
        if line and (size + 1 + len(word) > width or full):
            lines.append(" ".join(line))
            line, size = [], 0
        size += len(word) + (1 if line else 0)
        line.append(word)
    if line:
        lines.append(" ".join(line))
    return lines


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
        if _break_badness(word, words[i + 1] if i + 1 < len(words) else None) == 0.0:
            out.append(" ".join(current))
            current = []
    if current:
        out.append(" ".join(current))
    return out


def _break_badness(word: str, following: str | None) -> float:
    """How bad a break after `word` reads: 0 at a sentence end (or the text's end), 0.5 after
    a clause's punctuation, 1 inside a clause."""
    if following is None:
        return 0.0
    if not following[:1].islower() and ends_sentence(word.replace("\u2026", "..."), following):
        return 0.0
    return 0.5 if word.endswith((",", ";", ":", "\u2014", "\u2013")) else 1.0


# The layout's costs (`layout_cues`): fewer lines first (each line costs `_LINE`, more than
# any other choice), then fewer cues, then breaks where the text breaks, no line of a lone
# word. A cue's lines are then evened out (`_even_lines`).
_LINE = 100.0
_CUE = 25.0
_CUE_BREAK = 50.0  # x the break's badness: a cue that ends mid-clause
_LINE_BREAK = 8.0  # x the break's badness: a line that ends mid-clause
_LONE_WORD = 60.0  # a line of one word in a cue of several lines, or a cue of one word
_SHORT_CUE = 5.0  # a line a cue before the last leaves empty (the first cues are the full ones)
_RAGGED = 100.0  # x the lines' squared deviation from their mean, over the width squared
#: A final of more words is laid out greedily (the search costs words x lines per cue; so
#: long a text is a damaged recording, not an utterance).
_SEARCH_MAX_WORDS = 3000
#: A final of at most this many lines has its lines evened out (a search over its words).
_EVEN_MAX_LINES = 12


class _Words:
    """A final's words with what the layout asks of them: a run's length, a break's badness."""

    def __init__(self, words: list[str], width: int, max_words: int | None) -> None:
        self.words, self.width, self.max_words = words, width, max_words
        self.n = len(words)
        self._sum = [0]
        for w in words:
            self._sum.append(self._sum[-1] + len(w))
        self.bad = [
            _break_badness(w, words[i + 1] if i + 1 < self.n else None) for i, w in enumerate(words)
        ]

    def length(self, i: int, j: int) -> int:
        """Characters of the line words[i:j]."""
        return self._sum[j] - self._sum[i] + (j - i - 1)

    def ends(self, i: int, stop: int) -> range:
        """Where a line that starts at word `i` may end (exclusive, at most `stop`): as long
        as it fits the width and the word count; a lone word always fits."""
        j = i + 1
        most = stop if self.max_words is None else min(stop, i + self.max_words)
        while j < most and self.length(i, j + 1) <= self.width:
            j += 1
        return range(i + 1, j + 1)

    def line(self, i: int, j: int) -> str:
        return " ".join(self.words[i:j])


def layout_cues(
    text: str, width: int = LINE_WIDTH, max_lines: int = MAX_LINES, max_words: int | None = None
) -> list[list[str]]:
    """`text` as cues of at most `max_lines` lines of at most `width` characters (and
    `max_words` words), whole words only: the fewest lines (each as full as the words allow),
    then the fewest cues, cues and lines breaking at sentence ends, then clauses, where that
    costs no line; no line of a lone word where another layout of as many lines avoids it; a
    cue's lines evened out. A search over the words (dynamic programming)."""
    ws = _Words(text.split(), width, max_words)
    if ws.n == 0:
        return []
    if ws.n > _SEARCH_MAX_WORDS:
        lines = wrap_text(text, width, max_words)
        return [lines[i : i + max_lines] for i in range(0, len(lines), max_lines)]
    depth = min(max_lines, ws.n)
    inf = float("inf")
    # cost[i][k]: the best cost of words[i:] when the current cue already has k lines
    cost = [[inf] * depth for _ in range(ws.n + 1)]
    pick: list[list[tuple[int, bool]]] = [[(0, True)] * depth for _ in range(ws.n + 1)]
    cost[ws.n] = [0.0] * depth
    for i in range(ws.n - 1, -1, -1):
        for k in range(depth):
            best, choice = inf, (0, True)
            for j in ws.ends(i, ws.n):
                lone = j - i == 1
                # end the cue after this line
                c = _LINE + _CUE
                if j < ws.n:
                    c += _CUE_BREAK * ws.bad[j - 1] + _SHORT_CUE * (depth - 1 - k)
                if lone and (k > 0 or ws.n > 1):
                    c += _LONE_WORD
                c += cost[j][0]
                if c < best:
                    best, choice = c, (j, True)
                if k + 1 < depth and j < ws.n:  # or go on to the cue's next line
                    c = _LINE + _LINE_BREAK * ws.bad[j - 1] + (_LONE_WORD if lone else 0.0)
                    c += cost[j][k + 1]
                    if c < best:
                        best, choice = c, (j, False)
            cost[i][k], pick[i][k] = best, choice
    sizes: list[int] = []  # lines per cue
    i, k = 0, 0
    while i < ws.n:
        j, last = pick[i][k]
        if last:
            sizes.append(k + 1)
        i, k = j, 0 if last else k + 1
    return _even_lines(ws, sizes) or _lines_of(ws, pick, sizes)


def _lines_of(ws: _Words, pick: list[list[tuple[int, bool]]], sizes: list[int]) -> list[list[str]]:
    """The cues as the search picked their lines."""
    cues: list[list[str]] = []
    i = 0
    for size in sizes:
        cue = []
        for k in range(size):
            j = pick[i][k][0]
            cue.append(ws.line(i, j))
            i = j
        cues.append(cue)
    return cues


def _even_lines(ws: _Words, sizes: list[int]) -> list[list[str]] | None:
    """The final as cues of `sizes` lines (as many as the search found), its breaks moved to
    where they read best: lines of even length, breaks where the text breaks, no lone word;
    None for a final of more lines than `_EVEN_MAX_LINES` (keep the search's)."""
    count = sum(sizes)
    if count > _EVEN_MAX_LINES:
        return None
    ends_cue = {sum(sizes[: c + 1]) - 1 for c in range(len(sizes))}
    mean = ws.length(0, ws.n) / count  # the spaces at breaks count as characters of neither
    scale = _RAGGED / (ws.width * ws.width)
    inf = float("inf")
    # cost[line][i]: lines line.. of words[i:]
    cost = [[inf] * (ws.n + 1) for _ in range(count + 1)]
    pick = [[ws.n] * (ws.n + 1) for _ in range(count + 1)]
    cost[count][ws.n] = 0.0
    for line in range(count - 1, -1, -1):
        weight = _CUE_BREAK if line in ends_cue else _LINE_BREAK
        for i in range(ws.n):
            best, choice = inf, ws.n
            for j in ws.ends(i, ws.n):
                if (j == ws.n) != (line == count - 1):
                    continue
                c = scale * (ws.length(i, j) - mean) ** 2 + cost[line + 1][j]
                c += _LONE_WORD if j - i == 1 and ws.n > 1 else 0.0
                c += weight * ws.bad[j - 1] if j < ws.n else 0.0
                if c < best:
                    best, choice = c, j
            cost[line][i], pick[line][i] = best, choice
    if cost[0][0] == inf:  # cannot happen (the search's breaks are one answer); be safe
        return None
    cues: list[list[str]] = []
    i = line = 0
    for size in sizes:
        cue = []
        for _ in range(size):
            j = pick[line][i]
            cue.append(ws.line(i, j))
            i, line = j, line + 1
        cues.append(cue)
    return cues
