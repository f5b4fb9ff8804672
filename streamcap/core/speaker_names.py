"""Renaming speakers: a stream's names map, how a rename changes it, how it applies. Pure.

A caption's `speaker` is its *label*: what the voice labeller gave it ("Speaker 2", an enrolled
"Mary") or a room publisher's name. A label is never rewritten: the log and the recording keep
it. A stream keeps a *names map* from labels to the names shown instead ({"Speaker 2": "Mary"}),
and the server applies it where captions go out (viewers, replays, subtitle and text files). So
one rename reaches the past and the future at once, and can be taken back (issue 37, item 4).

A rename request is a map too, ``{KEY: NAME}``. ``KEY`` stands for every label shown as ``KEY``
now: the label ``KEY`` itself and each label the map already shows as ``KEY`` (a page shows the
new name; renaming "Mary" again renames the voice behind it). ``NAME`` "" (or the label itself)
takes the rename back. Two labels may get the same name (the labeller split one person in two).
The rules on the text of names (length, look-alikes, controls) are the server's
(`server.client_text.parse_speaker`): they come in as ``check``, which returns a name in its
normal form or raises ValueError.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace

from streamcap.core.captions import Caption

#: Labels one stream's map may rename (a meeting has a dozen voices; a room eight publishers).
MAX_NAMES = 64

#: A name's text rules: the name in its normal form, or ValueError (`client_text.parse_speaker`).
CheckName = Callable[[str], str]


class NamesError(ValueError):
    """A rename that cannot be applied; the message says why, in one line."""


def _checked(value: str, what: str, check: CheckName) -> str:
    try:
        name = check(value)
    except ValueError as e:
        raise NamesError(f"{what}: {e}") from None
    if name != value:
        raise NamesError(f"{what} {value[:40]!r} is not in its normal form ({name!r})")
    return name


def parse_request(obj: object, check: CheckName) -> dict[str, str]:
    """A rename request (decoded JSON) checked: a non-empty object of label -> name (``""``
    takes a rename back), at most `MAX_NAMES` entries, every label and name one that
    ``check`` keeps as it is (a name in another form would not match the captions' labels)."""
    if not isinstance(obj, dict):
        raise NamesError(
            'the body must be a JSON object of label -> name, e.g. {"Speaker 2": "Mary"}'
        )
    if not obj:
        raise NamesError("no rename given")
    if len(obj) > MAX_NAMES:
        raise NamesError(f"at most {MAX_NAMES} renames at once, got {len(obj)}")
    out: dict[str, str] = {}
    for key, value in obj.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise NamesError("labels and names must be strings")
        label = _checked(key, "label", check)
        out[label] = "" if value == "" else _checked(value, "name", check)
    return out


def check_map(obj: object, check: CheckName) -> dict[str, str]:
    """A whole names map as it is stored (a recording read back): label -> a name that is not
    the label itself, both kept as they are by ``check``, at most `MAX_NAMES`."""
    if not isinstance(obj, dict) or len(obj) > MAX_NAMES:
        raise NamesError(f"a names map is an object of at most {MAX_NAMES} label -> name")
    out: dict[str, str] = {}
    for key, value in obj.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise NamesError("labels and names must be strings")
        label = _checked(key, "label", check)
        name = _checked(value, "name", check)
        if name == label:
            raise NamesError(f"{label!r} renamed to itself")
        out[label] = name
    return out


def merge_names(current: Mapping[str, str], changes: Mapping[str, str]) -> dict[str, str]:
    """The map after a checked request (`parse_request`): each key renames the label of that
    name and every label ``current`` shows as it; a name ``""`` or equal to the label takes
    that label's rename back. Every key is read against ``current`` (the order of the request
    does not matter); one label given two different names is refused, as is a map that would
    pass `MAX_NAMES`."""
    wanted: dict[str, str] = {}
    for key, name in changes.items():
        for label in {key, *(lab for lab, shown in current.items() if shown == key)}:
            target = "" if name == label else name
            if wanted.get(label, target) != target:
                raise NamesError(f"two names for {label!r} in one request")
            wanted[label] = target
    out = dict(current)
    for label, name in wanted.items():
        if name:
            out[label] = name
        else:
            out.pop(label, None)
    if len(out) > MAX_NAMES:
        raise NamesError(f"a stream renames at most {MAX_NAMES} labels")
    return out


def shown_as(label: str, names: Mapping[str, str]) -> str:
    """The name a caption labelled ``label`` is shown with ("" stays "": nobody named)."""
    return names.get(label, label) if label else label


def renamed(caption: Caption, names: Mapping[str, str]) -> Caption:
    """``caption`` with its speaker shown as the map says (the same object when unchanged)."""
    name = shown_as(caption.speaker, names)
    return caption if name == caption.speaker else replace(caption, speaker=name)
