"""A stream's own prompt: the words the model should know, given to every decode.

Whisper reads its prompt (after ``<|startofprev|>``) as the text that came before the audio, so
a list of names and terms there makes the decoder prefer their spelling ("Kubernetes",
"Nguyen"). A stream's prompt is the operator's or publisher's text plus its vocabulary, written
as a comma list; the policy's context (the text said before, `PolicyConfig.prompt_chars`) goes
after it, nearest the audio. The reference `generate` of an exactness check gets the same
token ids (they are in the decode's `DecodingOptions`), so finals stay exact.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

#: Longest prompt text a stream may set (characters): the model keeps at most 223 tokens.
MAX_PROMPT_CHARS = 1000
#: Most vocabulary terms, and the longest term (characters).
MAX_TERMS = 100
MAX_TERM_CHARS = 64
_SPLIT = re.compile(r"[,;\n]+")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def parse_vocabulary(value: str | Iterable[str]) -> tuple[str, ...]:
    """Terms from "Kubernetes, Nguyen; gRPC" or a list of strings: trimmed, duplicates dropped
    (first spelling kept, case-insensitively), order kept. ValueError on a term too long, too
    many terms, or control characters."""
    items = _SPLIT.split(value) if isinstance(value, str) else list(value)
    terms: dict[str, str] = {}
    for item in items:
        if not isinstance(item, str):
            raise ValueError("vocabulary terms must be strings")
        term = " ".join(item.split())
        if not term:
            continue
        if _CONTROL.search(term):
            raise ValueError("vocabulary terms must not hold control characters")
        if len(term) > MAX_TERM_CHARS:
            raise ValueError(f"vocabulary term {term[:20]!r}... is over {MAX_TERM_CHARS} chars")
        terms.setdefault(term.casefold(), term)
    if len(terms) > MAX_TERMS:
        raise ValueError(f"at most {MAX_TERMS} vocabulary terms, got {len(terms)}")
    return tuple(terms.values())


def stream_prompt(prompt: str = "", vocabulary: Sequence[str] = ()) -> str:
    """The prompt text of a stream: `prompt`, then the vocabulary as "A, B, C." ("" if none).
    ValueError when it is longer than `MAX_PROMPT_CHARS` or holds control characters."""
    text = " ".join(prompt.split())
    if _CONTROL.search(prompt.replace("\n", " ").replace("\t", " ")):
        raise ValueError("the prompt must not hold control characters")
    terms = parse_vocabulary(vocabulary)
    if terms:
        text = f"{text} {', '.join(terms)}." if text else f"{', '.join(terms)}."
    if len(text) > MAX_PROMPT_CHARS:
        raise ValueError(f"the prompt is {len(text)} characters; at most {MAX_PROMPT_CHARS}")
    return text


def join_prompt_ids(
    fixed: Sequence[int], context: Sequence[int], max_tokens: int
) -> tuple[int, ...]:
    """The stream's prompt ids, then as much of the context's end as fits in `max_tokens`
    (the stream's own prompt is cut last: it is what the operator asked for)."""
    head = tuple(fixed)[:max_tokens]
    room = max_tokens - len(head)
    tail = tuple(context)[-room:] if room > 0 and context else ()
    return head + tail
