"""Which exceptions are the user's to fix, and how to say so in one line.

Only errors raised *on purpose* for a person to act on become one line: `UserError` (raised by
the command line for bad flags, paths and the like) and the few library errors whose types
exist for exactly that (audio that cannot be read or captured, a model that cannot be found or
is damaged), which say so by deriving from `ReportedError`. Anything else (a stray
``ValueError`` or ``OSError`` included) is a bug and keeps its traceback, so it gets reported
instead of hidden behind a tidy message. This module is a leaf: it imports nothing of streamcap.
"""

from __future__ import annotations


class ReportedError(Exception):
    """An error raised on purpose for a person to act on: ``str()`` is its one line.

    A mixin, so that each layer's own error types (`audio.errors.AudioError`,
    `models.registry.ModelNotFoundError`, ...) can say so while keeping their usual base
    (``LookupError``, ``ValueError``) and without this leaf module importing them."""


class UserError(ReportedError):
    """Something the user can fix (a flag, a path, a port); ``str()`` is the one line to print."""


def user_message(exc: BaseException) -> str | None:
    """The one-line message for a user-facing error, or None for a bug (show the traceback)."""
    if isinstance(exc, ReportedError):
        return _one_line(exc)
    return None


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text or type(exc).__name__
