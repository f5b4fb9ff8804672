"""A caption stream as CEA-608 screens for OBS: what ``SendStreamCaption`` is sent, and when.

What OBS does with a text (OBS 29.0.2 with libcaption, measured; docs/obs.md, "Native captions
(CC) in your stream"): it wraps the text at 32 columns and at each line break into rows of one
*pop-on* caption (erase the hidden memory, load, a preamble per row, the characters, end of
caption: the screen changes at once) and writes all of it into the SEI of the next video frame
of its stream output; the screen stays until the next text replaces it, and an empty text
erases it. So each text is a whole screen. Live captions are *roll-up* on television: the new
row comes in at the bottom and the rows above move up. `RollUp608` emulates that with OBS's
screens, 2 or 3 rows high:

- **Rows** of at most `ROW_CHARS` (32) characters, words never split (a word longer than a row
  is). Each screen is the last rows of the running text, the bottom one growing word by word.
- **Characters**: only 608's (`CHARSET`: the basic set, the special and the extended Western
  European ones, as libcaption maps them). Others become their nearest ("ő" is "o", "…" is
  "..."), what has none is dropped (608 carries Latin script only). The ASCII apostrophe goes
  as 608's basic one (’): libcaption sends "'" as an extended character, four bytes, which
  decoders without the extended set show as a space.
- **Finals are sent once**: each word enters the running text once. **Partials** only as
  roll-up allows, which cannot take a word back: the words of a partial's locked prefix
  (``committed_chars``, which the final repeats unchanged), never the rest; the final then
  adds what follows them.
- **The rate 608 carries**: field 1 holds one byte pair per frame, 29.97 pairs a second
  (about 60 characters). A screen costs the pairs libcaption writes for it (`screen_pairs`),
  so the next one waits until the channel has carried it. A burst of text is paced and no row
  is skipped: a screen moves on by at most its height, so every row is shown at the bottom or
  above it. At 2 rows of 32 characters a screen costs about 1.3 s, and the text can move on
  by up to 48 characters a second, more than anyone speaks.
- **No split end of caption**: libcaption cuts a screen into messages of 31 pairs and starts
  each further one with "resume caption loading" twice; when the first of the two "end of
  caption" codes ends a message, a decoder takes the second for another one and flips back
  to the old screen (seen in OBS's stream: `splits_end_of_caption`). About one screen in a
  hundred would; such a screen goes out with one row less, its newest word held back, or
  its bottom row alone, whichever is first not split.
- A screen with nothing new for `RollUpConfig.clear_after_s` is erased (``""``), and the text
  after it starts on a fresh screen.
- A change of speaker starts a row with ">> " (608's mark for it) and the name when known.

Pure: time is an argument (`due` and `take` take ``now``, seconds); the sink that drives
it is `streamcap.sinks.obs`.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass

from streamcap.core.captions import Caption

__all__ = [
    "CHARSET",
    "ROW_CHARS",
    "RollUp608",
    "RollUpConfig",
    "screen_pairs",
    "splits_end_of_caption",
    "to_608",
]

#: The characters of a 608 row.
ROW_CHARS = 32
#: 608's basic set, codes 0x20-0x7f (one byte each; eight of ASCII's places hold accents).
_BASIC = (
    ' !"#$%&’()á+,-./0123456789:;<=>?@ABCDEFGHIJKLMNOPQRSTUVWXYZ[é]íóúabcdefghijklmnopqrstuvwxyz'
    "ç÷Ññ█"
)
#: The special North American set (a byte pair each).
_SPECIAL = "®°½¿™¢£♪à\u00a0èâêîôû"
#: The extended Western European sets (a basic stand-in and a byte pair each).
_EXTENDED = (
    "ÁÉÓÚÜü‘¡*'—©℠•“”ÀÂÇÈÊËëÎÏïÔÙùÛ«»"  # Spanish, miscellaneous, French
    "ÃãÍÌìÒòÕõ{}\\^_|~ÄäÖöß¥¤¦ÅåØø┌┐└┘"  # Portuguese, German, Danish
)
#: Every character a 608 row can hold (libcaption's `eia608_char_map`).
CHARSET = frozenset(_BASIC + _SPECIAL + _EXTENDED)
_KIND = {**dict.fromkeys(_BASIC, 0), **dict.fromkeys(_SPECIAL, 1), **dict.fromkeys(_EXTENDED, 2)}
#: Nearest 608 text for characters that Unicode's decomposition does not bring into the set.
_NEAREST = {
    "'": "’", "`": "’", "´": "’", "′": "’", "‚": ",", "„": "“", "″": '"', "–": "-", "‑": "-",
    "‐": "-", "―": "—", "−": "-", "…": "...", "€": "EUR", "‹": "<", "›": ">", "æ": "ae",
    "Æ": "AE", "œ": "oe", "Œ": "OE", "ł": "l", "Ł": "L", "đ": "d", "Đ": "D", "ð": "d",
    "Ð": "D", "þ": "th", "Þ": "Th", "ı": "i", "ŀ": "l", "×": "x", "·": "-", "\t": " ",
    "\n": " ", "\r": " ", "\u00a0": " ", "\u202f": " ", "\u2009": " ", "\u200b": "",
}  # fmt: skip
#: Byte pairs per second that field 1 carries: one per frame at 30000/1001 frames a second.
PAIRS_PER_S = 30000 / 1001
#: The byte pairs one caption message of libcaption holds (``cc_count``, 5 bits).
_MESSAGE_PAIRS = 31
_SPACES = re.compile(" {2,}")


def to_608(text: str) -> str:
    """``text`` in 608's characters: kept, replaced by its nearest, or dropped (see the
    module docstring); runs of spaces become one."""
    out: list[str] = []
    for ch in text:
        near = _NEAREST.get(ch)
        if near is not None:
            out.append(near)
        elif ch in CHARSET:
            out.append(ch)
        else:
            base = unicodedata.normalize("NFKD", ch)
            out.append("".join(c for c in base if c in CHARSET and not unicodedata.combining(c)))
    return _SPACES.sub(" ", "".join(out))


def _libcaption(screen: str) -> tuple[int, bool]:
    """How libcaption (OBS 29) writes ``screen`` as a pop-on caption: the byte pairs of field
    1, and whether its two end-of-caption codes land in different messages.

    Its writer (``sei_from_caption_frame``): erase non-displayed memory and resume caption
    loading; per row a preamble, then the characters, basic ones two to a pair, a special one
    as its pair and a resume (a no-op that keeps a repeated one from being taken for a
    repeated control code), an extended one as a space (with the basic character before it)
    and its pair; end of caption twice. A message holds 31 pairs; each one after the first
    starts with resume caption loading twice. So when the first end of caption fills a
    message, the second follows a resume: a decoder takes it as a second end of caption
    (only a code repeated at once is ignored) and flips back to the screen before
    (tests/sinks/test_obs_real.py saw ffmpeg show both)."""
    count = total = 2  # erase non-displayed memory, resume caption loading

    def put() -> None:
        nonlocal count, total
        if count == _MESSAGE_PAIRS:
            count = 0
        if count == 0:
            count, total = 2, total + 2
        count, total = count + 1, total + 1

    for row in screen.split("\n") if screen else ():
        put()  # the row's preamble
        pending = False
        for ch in row:
            kind = _KIND.get(ch, 0)
            if kind == 0:
                if pending:
                    put()
                pending = not pending
            else:
                if pending or kind == 2:
                    put()  # the basic character before it (with a space), or a space
                put()
                if kind == 1:
                    put()  # the resume after a special character
                pending = False
        if pending:
            put()
    put()
    split = count == _MESSAGE_PAIRS
    put()
    return total, split


def screen_pairs(screen: str) -> int:
    """The byte pairs of field 1 that libcaption writes for ``screen`` (rows split at "\\n")."""
    return _libcaption(screen)[0]


def splits_end_of_caption(screen: str) -> bool:
    """True if libcaption would write ``screen`` with its two end-of-caption codes apart, which
    a decoder takes for two (see `_libcaption`): such a screen is never sent."""
    return _libcaption(screen)[1]


@dataclass(frozen=True)
class RollUpConfig:
    """How a stream's captions become 608 screens."""

    #: rows on screen (608's roll-up is 2, 3 or 4 rows; live captions use 2 or 3)
    rows: int = 2
    #: send the locked words of partials before their final (False: finals only)
    partials: bool = True
    #: erase a screen that had nothing new for this long (seconds)
    clear_after_s: float = 6.0
    #: byte pairs a second the channel carries (field 1 at 29.97 frames a second)
    pairs_per_s: float = PAIRS_PER_S
    #: ">> " (and the name) at a change of speaker
    speaker_marks: bool = True

    def __post_init__(self) -> None:
        if not 1 <= self.rows <= 4:
            raise ValueError("608 roll-up shows 1 to 4 rows (2 or 3 for live captions)")
        if self.clear_after_s <= 0 or self.pairs_per_s <= 0:
            raise ValueError("clear_after_s and pairs_per_s must be positive")


class RollUp608:
    """One stream's running text and the 608 screens that show it (see the module docstring).

    ``add`` takes captions in their order; ``due`` says when a screen is next due; ``take``
    gives it (and counts it as sent)."""

    def __init__(self, config: RollUpConfig | None = None) -> None:
        self.config = config or RollUpConfig()
        self._rows: list[str] = []  # the running text's rows from `_base` on
        self._base = 0  # the absolute index of `_rows[0]` (older rows are let go)
        self._floor = 0  # the first row a screen may show (rows before it were erased)
        self._new_row = False  # the next word starts a row (after an erase, a speaker change)
        self._shown_row = -1  # the bottom row of the screen on air (absolute index)
        self._shown_len = 0  # that row's length when it went out
        self._on_air = False  # a screen is showing (not erased)
        self._next_at = -math.inf  # the channel is free from then on
        self._sent_at = -math.inf  # when the screen on air went out
        self._speaker = ""  # the speaker of the last words put
        self._ahead: list[str] = []  # words put from partials that no final has confirmed yet
        self._ahead_segment: int | None = None
        #: every word put into the running text, in 608 characters (what the screens carry)
        self.words_put = 0

    # -- the running text ------------------------------------------------------------------

    def add(self, caption: Caption) -> None:
        """Take one caption (a final, or a partial whose locked words are new)."""
        if caption.type == "final":
            self._add_final(caption)
        elif self.config.partials:
            self._add_partial(caption)

    def _add_partial(self, caption: Caption) -> None:
        if self._ahead and caption.segment != self._ahead_segment:
            return  # another segment's words are on screen ahead of their final
        locked = caption.text[: max(0, caption.committed_chars)]
        words = locked.split()
        if locked and not locked[-1].isspace():
            words = words[:-1]  # the final may go on with this word ("you" -> "your")
        new = words[len(self._ahead) :]
        if new:
            self._put(new, caption.speaker)
            self._ahead += new
            self._ahead_segment = caption.segment

    def _add_final(self, caption: Caption) -> None:
        words = caption.text.split()
        i = 0
        while i < len(self._ahead) and i < len(words) and self._ahead[i] == words[i]:
            i += 1
        if i == len(words) and i < len(self._ahead):
            # a final that ends inside the words shown ahead (a change of voice split the
            # segment): the rest are the next final's
            self._ahead = self._ahead[i:]
            self._ahead_segment = None
            return
        # the words shown stand for the final's first ones (the same by the partials'
        # contract; if a final broke it, what was shown stays and nothing is said twice)
        rest = words[len(self._ahead) :]
        midway = bool(self._ahead)  # its first words are on screen: no mark between them
        self._ahead, self._ahead_segment = [], None
        if rest:
            self._put(rest, caption.speaker, mark=not midway)

    def _put(self, words: list[str], speaker: str, mark: bool = True) -> None:
        if mark and self.config.speaker_marks and speaker and speaker != self._speaker:
            words = [">>", f"{speaker}:", *words]
            self._new_row = True
        if speaker:
            self._speaker = speaker
        for word in words:
            w = to_608(word).strip()
            if not w:
                continue
            self.words_put += 1
            while len(w) > ROW_CHARS:  # a word longer than a row: the only split
                self._append(w[:ROW_CHARS])
                w = w[ROW_CHARS:]
            self._append(w)

    def _append(self, word: str) -> None:
        last = self._rows[-1] if self._rows else None
        if last is None or self._new_row or len(last) + 1 + len(word) > ROW_CHARS:
            self._rows.append(word)
            self._new_row = False
        else:
            self._rows[-1] = f"{last} {word}"

    @property
    def text_rows(self) -> list[str]:
        """The running text's rows still kept (the screens' material), oldest first."""
        return list(self._rows)

    # -- the screens -----------------------------------------------------------------------

    def _last(self) -> int:
        return self._base + len(self._rows) - 1

    def _pending(self) -> bool:
        last = self._last()
        if last < max(self._floor, 0):
            return False
        if last > self._shown_row:
            return True
        return len(self._rows[self._shown_row - self._base]) > self._shown_len

    @property
    def waiting(self) -> bool:
        """Text that no screen has shown yet."""
        return self._pending()

    def due(self, now: float) -> float | None:
        """Seconds until a screen is due (0: now), or None while there is nothing to send."""
        if self._pending():
            return max(0.0, self._next_at - now)
        if self._on_air:
            return max(0.0, max(self._next_at, self._sent_at + self.config.clear_after_s) - now)
        return None

    def take(self, now: float) -> str | None:
        """The screen to send now, or None if none is due; the text of a screen is its rows
        joined by "\\n" ("" erases the screen)."""
        wait = self.due(now)
        if wait is None or wait > 0:
            return None
        if not self._pending():
            return self._erase(now)
        shown = self._shown_row - self._base
        grown = 0 <= shown < len(self._rows) and len(self._rows[shown]) > self._shown_len
        first_new = max(self._shown_row if grown else self._shown_row + 1, self._floor)
        options = list(self._screens(first_new))
        fine = (o for o in options if not splits_end_of_caption("\n".join(o[1])))
        top, rows = next(fine, options[-1])
        screen = "\n".join(rows)
        self._shown_row, self._shown_len = top + len(rows) - 1, len(rows[-1])
        self._on_air = True
        self._sent(screen, now)
        self._let_go(top)
        return screen

    def _screens(self, first_new: int) -> Iterator[tuple[int, list[str]]]:
        """The screens that would show what is new, best first (its top row's index, its
        rows): up to `rows` rows moved on; one row less; the newest word held back; the
        bottom row alone (which no end of caption can split)."""
        height = self.config.rows
        bottom = min(self._last(), first_new + height - 1)

        def window(last: int) -> tuple[int, list[str]]:
            top = max(self._floor, last - height + 1)
            return top, self._rows[top - self._base : last + 1 - self._base]

        yield window(bottom)
        if bottom > first_new:
            yield window(bottom - 1)
        top, rows = window(bottom)
        held = rows[-1].rsplit(" ", 1)[0]
        if held != rows[-1] and (bottom > self._shown_row or len(held) > self._shown_len):
            yield top, [*rows[:-1], held]
        yield bottom, [rows[-1]]

    def _erase(self, now: float) -> str:
        self._on_air = False
        self._floor = self._last() + 1
        self._new_row = True
        self._sent("", now)
        self._let_go(self._floor)
        return ""

    def _sent(self, screen: str, now: float) -> None:
        self._sent_at = now
        self._next_at = now + screen_pairs(screen) / self.config.pairs_per_s

    def _let_go(self, keep_from: int) -> None:
        """Forget rows before ``keep_from`` that no screen can show again."""
        drop = min(keep_from, self._last() + 1) - self._base
        if drop > 0:
            del self._rows[:drop]
            self._base += drop

    def catch_up(self) -> None:
        """Skip what waits but the last screen's worth of rows (after OBS was away: text
        that was never on air live is not worth pacing out late)."""
        last = self._last()
        first = max(self._floor, last - self.config.rows + 1)
        if last >= first:
            self._floor = first
            self._shown_row, self._shown_len = first - 1, 0
