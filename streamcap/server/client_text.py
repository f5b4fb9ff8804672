"""The rules for text a client sends: prompts, vocabulary, names, query parameters.

Its own module because one set of Unicode rules serves every place a client's text comes in:
the start message (`protocol.parse_start`), the request's query string (`request`), and the
text and names the recorder reads back from `--record DIR` (`record`). Each rule says why:
names go into overlays and WebVTT voice tags and must not look alike, prompts may hold the
joiners scripts need, and nothing may hold lone surrogates, controls or bidi overrides.
"""

from __future__ import annotations

import re
import unicodedata

import regex

from .close import ProtocolError
from .close import bad_data as _bad

#: A publisher's name in a room: it goes into WebVTT voice tags and overlays, so no markup.
MAX_SPEAKER_CHARS = 32
_SPEAKER_BAD = re.compile(r"[<>&\"\x00-\x1f\x7f]")
#: Unicode categories no client text may hold: controls (C0, C1), format characters (bidi
#: overrides such as U+202E, zero-width characters) and surrogates; names also refuse private-use
#: and unassigned code points (invisible or look-alike names).
_TEXT_BAD_CATEGORIES = frozenset({"Cc", "Cf", "Cs"})
_NAME_BAD_CATEGORIES = _TEXT_BAD_CATEGORIES | {"Co", "Cn"}
#: Characters that draw nothing in a name, so "Ana" + one of them would show as a second
#: "Ana": Unicode's Default_Ignorable_Code_Point (the `regex` module keeps the Unicode data;
#: it covers the Hangul fillers U+115F/U+1160/U+3164/U+FFA0, the combining grapheme joiner
#: U+034F and the Khmer inherent vowels, besides format characters), and the two blank-looking
#: symbols that property leaves out (U+2800 braille blank, U+1D159 null notehead).
_NAME_INVISIBLE = regex.compile(r"[\p{Default_Ignorable_Code_Point}\u2800\U0001D159]")
#: Variation selectors pick a glyph's style (text or emoji: U+2764 U+FE0F); they are ignorable,
#: and a name is compared and shown without them rather than refused (emoji names keep working).
_VARIATION_SELECTORS = regex.compile(r"\p{Variation_Selector}")
#: Joiners that Persian, Indic scripts and emoji sequences need (format characters, but not
#: invisible tricks): allowed in prompts and vocabulary, never in names.
_JOINERS = frozenset("\u200c\u200d")
#: Whitespace controls a prompt may hold; they become plain spaces.
_PROMPT_SPACES = str.maketrans({"\t": " ", "\n": " ", "\r": " ", "\v": " ", "\f": " "})


def well_formed(value: str) -> bool:
    """`value` is well-formed Unicode: it encodes to UTF-8 (no lone surrogates)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _bad_char(
    value: str, categories: frozenset[str], allowed: frozenset[str] = frozenset()
) -> str | None:
    """The first character of `value` in one of `categories` (and not `allowed`), as U+XXXX."""
    for ch in value:
        if unicodedata.category(ch) in categories and ch not in allowed:
            return f"U+{ord(ch):04X}"
    return None


def plain(value: str) -> bool:
    """`value` is well-formed Unicode without control or format characters (no joiners either:
    a query parameter's rule)."""
    return well_formed(value) and _bad_char(value, _TEXT_BAD_CATEGORIES) is None


def check_text(value: str, what: str, *, spaces: bool = False) -> str:
    """A client's text: well-formed Unicode without control or format characters (1003).

    `spaces` (prompts): tabs and line breaks are allowed and become spaces, and the zero-width
    joiners that scripts need are kept; bidi overrides and other format characters are not."""
    if not well_formed(value):
        raise _bad(f"{what} is not well-formed Unicode (a lone surrogate)")
    allowed: frozenset[str] = frozenset()
    if spaces:
        value = value.translate(_PROMPT_SPACES)
        allowed = _JOINERS
    bad = _bad_char(value, _TEXT_BAD_CATEGORIES, allowed)
    if bad is not None:
        raise _bad(f"{what} must not hold control characters or format characters ({bad})")
    return value


def check_strings(obj: object, what: str) -> None:
    """Every string in a decoded JSON value (keys too) is well-formed Unicode."""
    if isinstance(obj, str):
        if not well_formed(obj):
            raise _bad(f"{what} holds text that is not well-formed Unicode (a lone surrogate)")
    elif isinstance(obj, dict):
        for k, v in obj.items():
            check_strings(k, what)
            check_strings(v, what)
    elif isinstance(obj, list):
        for v in obj:
            check_strings(v, what)


def normalise_name(value: str) -> str:
    """A name as it is compared and shown: NFKC (so full-width and other look-alike forms
    collide), variation selectors removed, spaces collapsed."""
    name = _VARIATION_SELECTORS.sub("", unicodedata.normalize("NFKC", value))
    return " ".join(name.split())


def _invisible_in_name(name: str) -> str | None:
    """The first character of `name` that shows nothing or that names may not hold (control,
    format, private-use, unassigned, default-ignorable, blank-looking), as U+XXXX."""
    bad = _bad_char(name, _NAME_BAD_CATEGORIES)
    if bad is not None:
        return bad
    m = _NAME_INVISIBLE.search(name)
    return f"U+{ord(m.group()):04X}" if m else None


def parse_speaker(value: object) -> str:
    """A speaker name: 1-32 characters once NFKC-normalised and spaces are collapsed, no markup,
    control, format (bidi, zero-width), private-use, unassigned or other invisible characters
    (it is shown in overlays and written into WebVTT ``<v Name>`` tags, and names must not look
    alike: "Ana" + a Hangul filler would be a second "Ana")."""
    if not isinstance(value, str):
        raise _bad(f"'speaker' must be a string, got {type(value).__name__}")
    if not well_formed(value) or "\ufffd" in value:  # U+FFFD: text broken on its way here
        raise _bad("invalid speaker name: not well-formed Unicode")
    name = normalise_name(value)
    bad = _invisible_in_name(name)
    if bad is not None:
        raise _bad(f"invalid speaker name {name[:40]!r}: it holds an invisible character ({bad})")
    if not name or len(name) > MAX_SPEAKER_CHARS or _SPEAKER_BAD.search(name):
        raise _bad(
            f"invalid speaker name {value[:40]!r}: 1-{MAX_SPEAKER_CHARS} characters, "
            'no < > & " or control characters'
        )
    return name


def name_rule(value: str) -> str:
    """`parse_speaker` as the rename rules take it (`core.speaker_names.CheckName`): a
    renamed speaker is shown where a publisher's name is, so the same rules; ValueError."""
    try:
        return parse_speaker(value)
    except ProtocolError as e:
        raise ValueError(e.reason) from None
