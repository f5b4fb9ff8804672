"""What a viewer already read keeps its form: one rule for partials and finals. Pure.

A new decode of a window often writes the same words with another capital letter, or without
the comma the last one had. On screen that is an erasure (the flicker metric counts every
character from the first change on), and it tells the reader nothing. So where the new words
are the words on screen, their screen form stays; an added sentence end is taken (it matters
more than the few characters after it on screen: capitals and commits follow it), and so is the
capital letter of the word after it; an added comma is not (on lf3, taking every added mark
raised flicker from 2.8 to 6.7).
"""

from __future__ import annotations

from streamcap.core.text import common_prefix, ends_sentence


def keep_form(shown: list[str], words: list[str]) -> list[str]:
    """`words`, spelt as on screen (`shown`) where they are the same words (see the module
    docstring for what changes anyway)."""
    same = common_prefix(shown, words)
    out: list[str] = []
    for old, new in zip(shown[:same], words, strict=False):
        after_stop = bool(out) and ends_sentence(out[-1])
        out.append(new if after_stop and old[:1] != new[:1] else merge_form(old, new))
    return out + words[same:]


def merge_form(old: str, new: str) -> str:
    """One word: `old` as shown, `new` as decoded (equal but for case and punctuation)."""
    lo, ln = old.lower(), new.lower()
    if ln == lo or lo.startswith(ln):  # case only, or punctuation dropped: keep the screen's
        return old
    if ln.startswith(lo):  # punctuation added: a sentence end is taken, a comma is not
        return old + new[len(old) :] if ends_sentence(new) else old
    return new
