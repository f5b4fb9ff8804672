"""What a run writes: JSON values of numpy scalars and configurations, and short figures.

Shared by scripts/eval_stream.py, eval_meeting.py and soak.py, so their files read alike.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import numpy as np


def json_default(o: Any) -> Any:
    """`json.dumps`'s fallback: numpy scalars as numbers, tuples as lists, the rest as text."""
    if isinstance(o, (np.floating, np.integer)):
        return o.item()
    if isinstance(o, tuple):
        return list(o)
    return str(o)


def config_dict(config: Any) -> dict[str, Any]:
    """A (nested) configuration dataclass as a dict."""
    return asdict(config)


def fmt(x: Any, spec: str = ".2f") -> str:
    """A figure for a title or a table: formatted by ``spec``, or "-" for none (or NaN)."""
    return format(x, spec) if isinstance(x, (int, float)) and x == x else "-"
