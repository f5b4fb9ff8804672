"""What every command shares: the error for flags that cannot work together, and the
progress note on stderr.

The flag groups live with their options (`model_options`, `live_options`, `outputs`,
`cluster`, `serve_setup`): each a frozen dataclass built once from the parsed flags at the
command's edge (its ``run``), so nothing below it reads argparse's Namespace.
"""

from __future__ import annotations

import sys

from streamcap.errors import UserError


class UsageError(UserError):
    """A combination of flags that cannot work: reported with the command's usage line."""


def say(message: str) -> None:
    """A progress note on stderr (stdout carries only captions, so it can be piped)."""
    print(message, file=sys.stderr, flush=True)
