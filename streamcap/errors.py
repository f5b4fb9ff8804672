"""Which exceptions are the user's to fix, and how to say so in one line."""

from __future__ import annotations


def user_error(exc: BaseException) -> str | None:
    """A one-line message for errors caused by input or setup, else None (a bug: traceback)."""
    from streamcap.audio.errors import AudioError
    from streamcap.decoding.speculative import DecodingError
    from streamcap.models.ctranslate2 import ModelFormatError
    from streamcap.models.registry import ModelNotFoundError

    if isinstance(exc, (AudioError, ModelNotFoundError, ModelFormatError, DecodingError)):
        return str(exc)
    if isinstance(exc, (ValueError, OSError)):
        return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return None
