"""Text that leaves the program as keystrokes or terminal output: what may pass as it is.

A final's text is model output (byte-level BPE can emit any byte, and whoever is heard can steer
it) and a file name is whatever the file system holds; both can carry characters that do
something instead of showing something: C0/C1 controls (ESC starts a terminal escape sequence;
typed by xdotool, ESC, BackSpace and DEL are key presses), and format characters (bidi overrides
and isolates such as U+202E reverse what follows; zero-width characters hide). The categories
are the server's rules for a client's text (`server.client_text`): controls, format characters
and surrogates, with the two joiners that Persian, Indic scripts and emoji sequences need kept.
Pure functions.
"""

from __future__ import annotations

import unicodedata

#: Unicode categories that act rather than show: controls (C0, C1), format characters (bidi
#: overrides and isolates, zero-width characters, soft hyphen) and lone surrogates.
ACTING_CATEGORIES = frozenset({"Cc", "Cf", "Cs"})
#: Zero-width non-joiner and joiner: format characters that scripts and emoji sequences need.
JOINERS = frozenset("\u200c\u200d")


def _acts(ch: str) -> bool:
    return unicodedata.category(ch) in ACTING_CATEGORIES and ch not in JOINERS


def typeable(text: str) -> str:
    """`text` as it may be typed into a window: every run of whitespace (tabs and line breaks
    included) one space, no space at either end, and controls and format characters other than
    the joiners dropped, so that no character becomes a key press (Escape, BackSpace, Delete)
    or reorders what is typed after it (U+202E)."""
    return " ".join("".join(ch for ch in text if ch.isspace() or not _acts(ch)).split())


def printable(text: str) -> str:
    """`text` for a message on a terminal: every character that does not print (controls,
    format characters, line breaks, unassigned and private-use code points; the space prints) as
    its Python escape (``\\x1b``, ``\\n``, ``\\u202e``), so a file name cannot move the cursor,
    colour the terminal, break a one-line message in two or reverse it; a byte of a file name
    that is not UTF-8 (a lone surrogate from `os.fsdecode`) shows as that byte (``\\xff``).
    Printable text, accents and all, is kept as it is."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else _escape(ch) for ch in text)


#: Escapes a reader knows by sight.
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(ch: str) -> str:
    if ch in _NAMED:
        return _NAMED[ch]
    n = ord(ch)
    if 0xDC80 <= n <= 0xDCFF:  # a byte that was not UTF-8 (a file name, `os.fsdecode`)
        return f"\\x{n - 0xDC00:02x}"
    if n < 0x100:
        return f"\\x{n:02x}"
    if n < 0x10000:
        return f"\\u{n:04x}"
    return f"\\U{n:08x}"
