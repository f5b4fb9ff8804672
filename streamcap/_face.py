"""A package's public face, imported lazily (PEP 562): the one helper every package shares.

A package's ``__init__`` lists its public names, each with the module of the package that
defines it, and gets back the module ``__getattr__`` and ``__dir__`` that import a name on first
use. Importing a package then costs nothing: ``import streamcap.audio`` loads neither PyAV nor
soxr, ``import streamcap.runtime`` no torch, until a name that needs them is asked for. Code
inside streamcap imports from the defining module; the faces are for users
(tests/test_exports.py checks both).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_face(
    package: str, exports: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``, whose ``exports`` maps each public name to
    the module of the package that defines it (``"Engine": "engine"``)."""
    namespace = sys.modules[package].__dict__

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{module}"), name)
        namespace[name] = value  # later lookups skip this hook
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *exports})

    return __getattr__, __dir__
