"""Which exceptions are the user's to fix, and how to say so in one line.

Only errors raised *on purpose* for a person to act on become one line: `UserError` (raised by
the command line for bad flags, paths and the like) and the few library errors whose types
exist for exactly that (audio that cannot be read or captured, a model that cannot be found or
is damaged). Anything else — a stray ``ValueError`` or ``OSError`` included — is a bug and keeps
its traceback, so it gets reported instead of hidden behind a tidy message.
"""

from __future__ import annotations


class UserError(Exception):
    """Something the user can fix (a flag, a path, a port); ``str()`` is the one line to print."""


def user_message(exc: BaseException) -> str | None:
    """The one-line message for a user-facing error, or None for a bug (show the traceback)."""
    if isinstance(exc, UserError):
        return _one_line(exc)
    # Imported here: `streamcap.errors` is loaded by every command, these modules are not light.
    from streamcap.audio.errors import AudioError
    from streamcap.models.ctranslate2 import ModelFormatError
    from streamcap.models.registry import ModelNotFoundError

    if isinstance(exc, (AudioError, ModelNotFoundError, ModelFormatError)):
        return _one_line(exc)
    return None


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text or type(exc).__name__
