"""Word-level text helpers and the one hallucination guard (live and offline). Pure functions.

Decodes of a growing window are compared word by word (case and punctuation aside), aligned
against what was already committed, trimmed of repetition loops and restarts, and dropped
when the model's own confidence says the "speech" was silence or noise.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from streamcap.core.decode_types import DecodeResult

__all__ = ["GuardConfig"]

SENTENCE_END = (".", "?", "!", "\u3002", "\uff1f", "\uff01")

#: Words ending in "." that never end a sentence: titles before a name, Latin and reference
#: abbreviations that always go on ("Mr." / "John Dashwood ..." was cut there).
NEVER_ENDS = frozenset(
    {
        "mr", "mrs", "ms", "mx", "dr", "prof", "st", "mt", "ft", "sr", "jr", "gen", "gov",
        "sen", "rep", "pres", "capt", "lt", "col", "sgt", "cmdr", "adm", "rev", "hon", "fr",
        "messrs", "mme", "mlle", "e.g", "i.e", "cf", "vs", "viz", "approx", "no", "nos", "vol",
        "fig", "figs", "ch", "sec", "pp", "p", "ca", "dept", "est", "op", "ref",
    }
)  # fmt: skip
#: Words ending in "." that end a sentence only when the next word starts one ("in the U.S."
#: ends, "U.S. troops" does not); unknown next word: not yet.
MAYBE_ENDS = frozenset(
    {"etc", "a.m", "p.m", "u.s", "u.k", "u.n", "e.u", "inc", "ltd", "co", "corp", "bros", "jan",
     "feb", "mar", "apr", "jun", "jul", "aug", "sep", "sept", "oct", "nov", "dec", "al"}
)  # fmt: skip
_CLOSERS = "\"')]}\u201d\u2019\u00bb"


def ends_sentence(word: str, next_word: str | None = None) -> bool:
    """True when `word` ends a sentence (the one rule for commits and capitals).

    "?", "!" and CJK stops always end one. A "." does not after a known abbreviation ("Mr.",
    "e.g."), an initial ("J."), or a number ("3." may be the start of "3.5" in the next
    decode); after an ambiguous abbreviation or a number it ends one when `next_word` is
    known and starts with a capital letter. Closing quotes and brackets are looked through.
    """
    w = word.rstrip(_CLOSERS)
    if not w.endswith(SENTENCE_END):
        return False
    if not w.endswith("."):
        return True
    stem = w.rstrip(".")
    key = stem.lower().lstrip("\"'([{\u201c\u2018\u00ab")
    if key in NEVER_ENDS or (len(key) == 1 and key.isalpha()):
        return False
    opening = next_word.lstrip(_CLOSERS + "\u201c\u2018\u00ab") if next_word else ""
    capital_next = opening[:1].isupper()
    if (
        key in MAYBE_ENDS
        or key.replace(",", "").isdigit()
        or ("." in key and all(len(p) <= 2 for p in key.split(".")))
    ):
        return capital_next
    return True


#: What Whisper tends to write on silence or noise (normalised). Dropped only when the model
#: itself also says "no speech" with some confidence: people do say these words.
SILENCE_PHRASES = frozenset(
    {
        "you", "thank you", "thanks", "thank you very much", "thank you so much",
        "thanks for watching", "thank you for watching", "thank you so much for watching",
        "thanks for watching and see you next time", "please subscribe", "bye", "bye bye",
        "subscribe to my channel", "like and subscribe", "please like and subscribe",
        "subtitles by the amara org community", "so", "oh", "uh", "um", "hmm", "i m sorry",
        "music", "applause", "silence", "the end",
    }
)  # fmt: skip


def norm_word(word: str) -> str:
    """A word for comparison: lower case, no punctuation."""
    return re.sub(r"[^\w]+", "", word.lower())


def norm_text(text: str) -> str:
    return " ".join(w for w in (norm_word(x) for x in text.split()) if w)


def words_of(text: str) -> list[str]:
    return text.split()


def align_prefix(done: Sequence[str], words: Sequence[str]) -> int:
    """Index in `words` where the part that repeats `done` ends (edit-distance alignment).

    A new decode of a window usually starts with the words already committed from it; when it
    words them differently, the best-matching prefix is skipped all the same.
    """
    if not done:
        return 0
    a = [norm_word(w) for w in done]
    b = [norm_word(w) for w in words]
    if b[: len(a)] == a:
        return len(a)
    prev = list(range(len(b) + 1))  # distance of a[:0] to b[:j]
    for i in range(1, len(a) + 1):
        cur = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1]))
        prev = cur
    best = min(prev)
    return max(j for j, d in enumerate(prev) if d == best)  # ties: assume words were replaced


def common_prefix(a: Sequence[str], b: Sequence[str]) -> int:
    n = 0
    while n < len(a) and n < len(b) and norm_word(a[n]) == norm_word(b[n]):
        n += 1
    return n


def trim_loop(words: list[str], min_repeats: int = 3, max_n: int = 12) -> list[str]:
    """Cut a phrase repeated back to back at the end down to one copy."""
    for n in range(1, max_n + 1):
        if len(words) < n * min_repeats:
            break
        tail = [norm_word(w) for w in words[-n:]]
        r = 1
        while (
            len(words) >= (r + 1) * n
            and [norm_word(w) for w in words[len(words) - (r + 1) * n : len(words) - r * n]] == tail
        ):
            r += 1
        if r >= min_repeats:
            return words[: len(words) - (r - 1) * n]
    return words


def trim_restart(words: list[str], min_words: int = 2, ngram: int = 4) -> list[str]:
    """Cut a decode that starts over or goes round (``A B C. A B C``, ``x y z w ... x y z w``).

    Shortened-context partials do this. A restart repeats the first three words (two after a
    sentence or clause end); a round repeats any ``ngram`` words seen before.
    """
    norm = [norm_word(w) for w in words]
    seen: set[tuple[str, ...]] = set()
    for i in range(len(norm)):
        if min_words <= i <= len(norm) - min_words:
            m = min(3, len(norm) - i)
            after_stop = words[i - 1].endswith((*SENTENCE_END, ","))
            if (m == 3 or after_stop) and norm[i : i + m] == norm[:m]:
                return words[:i]
        gram = tuple(norm[i : i + ngram])
        if len(gram) == ngram:
            if gram in seen:
                return words[:i]
            seen.add(gram)
    return words


@dataclass(frozen=True)
class GuardConfig:
    """When a decode's text is not speech (one rule for live captions and offline files).

    - no_speech_threshold / logprob_threshold: drop a decode whose no-speech probability is at
      least the first and whose average log-probability is at most the second (Whisper's rule;
      a decode without a log-probability, i.e. without tokens, counts as unsure).
    - min_avg_logprob: drop any decode less confident than this on average (noise and music;
      speech here measured above -1.0).
    - phrase_no_speech_threshold: drop a known silence phrase (`SILENCE_PHRASES`) when the
      no-speech probability is at least this.
    """

    no_speech_threshold: float = 0.6
    logprob_threshold: float = -1.0
    min_avg_logprob: float = -1.5
    phrase_no_speech_threshold: float = 0.2


#: Why a decode contributes no words (`drop_reason`), in the order the rules are tried.
DROP_REASONS = ("no_speech", "logprob", "silence_phrase", "empty")


def drop_reason(result: DecodeResult, guard: GuardConfig) -> str | None:
    """Why a decode's text should not become a caption, or None when it should.

    - "no_speech": no-speech probability >= `no_speech_threshold` and average log-probability
      <= `logprob_threshold` (or none: no tokens);
    - "logprob": average log-probability < `min_avg_logprob`;
    - "silence_phrase": a `SILENCE_PHRASES` text with no-speech probability >=
      `phrase_no_speech_threshold`;
    - "empty": the decode has no words.

    A decode without a no-speech probability (NaN) is judged by its words only. Repetition
    loops are trimmed to one copy (`result_words`), never dropped: a loop leaves its words.
    """
    ns = result.no_speech_prob
    lp = result.avg_logprob
    if not math.isnan(ns):
        if ns >= guard.no_speech_threshold and (lp is None or lp <= guard.logprob_threshold):
            return "no_speech"
        if lp is not None and lp < guard.min_avg_logprob:
            return "logprob"
        if ns >= guard.phrase_no_speech_threshold and norm_text(result.text) in SILENCE_PHRASES:
            return "silence_phrase"
    if not words_of(result.text):
        return "empty"
    return None


def is_hallucination(result: DecodeResult, guard: GuardConfig) -> bool:
    """True when a decode's text should not become a caption (`drop_reason` says why)."""
    return drop_reason(result, guard) is not None


def describe_drop(reason: str, result: DecodeResult | None, max_chars: int = 60) -> str:
    """``no_speech: p=0.71, avg_logprob=-1.20, text='...'``: a dropped decode, for a log line."""
    if result is None:
        return reason
    lp = "none" if result.avg_logprob is None else f"{result.avg_logprob:.2f}"
    text = result.text.strip()
    if len(text) > max_chars:
        text = text[: max_chars - 3] + "..."
    return f"{reason}: p={result.no_speech_prob:.2f}, avg_logprob={lp}, text={text!r}"


def result_words(result: DecodeResult, guard: GuardConfig, partial: bool = False) -> list[str]:
    """The words a decode contributes after the hallucination guard."""
    if is_hallucination(result, guard):
        return []
    words = trim_loop(words_of(result.text), 3 if result.stopped_by == "loop" else 4)
    if partial:
        words = trim_restart(words)
    return words
