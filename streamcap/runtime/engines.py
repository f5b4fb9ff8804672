"""The inference engines, by name: the engine port's registry.

An engine is anything that satisfies `runtime.engine_api.InferenceEngine`; a new one is its
module and one `register_engine` call with a factory that builds it from the model's options
(`EngineOptions`: what ``--model``, ``--assistant``, ``--device``, ``--threads`` and
``--precision`` say). The command line's ``--engine`` choices and help come from here
(`engine_names`, `describe_engine`), and `make_engine` is how the command line and the Ray
replicas build one. "transformers" (`runtime.engine.Engine`: exact speculative decoding on
Hugging Face transformers' Whisper) is the default.

Importing this module is cheap (the parser is built from it for ``--help``): an engine's
module, with torch, is imported by its factory.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from streamcap.errors import UserError
from streamcap.models.registry import DEFAULT_MODEL

if TYPE_CHECKING:
    from streamcap.runtime.engine_api import InferenceEngine

__all__ = [
    "DEFAULT_ENGINE",
    "EngineFactory",
    "EngineOptions",
    "UnknownEngine",
    "describe_engine",
    "engine_names",
    "make_engine",
    "register_engine",
]

#: The engine a command runs when none is named (``--engine``).
DEFAULT_ENGINE = "transformers"


@dataclass(frozen=True)
class EngineOptions:
    """Which model an engine loads, with which draft model, where and at which precision; an
    engine takes what applies to it."""

    model: str = DEFAULT_MODEL
    assistant: str | None = None  # a draft model sharing the main model's tokenizer
    device: str = "auto"  # auto, cpu, cuda or cuda:N
    threads: int | None = None  # CPU threads (None: the library's choice)
    precision: str = "auto"


#: Builds an engine (loads its model) from the model's options.
EngineFactory = Callable[[EngineOptions], "InferenceEngine"]


class UnknownEngine(UserError, ValueError):
    """An engine name nobody registered."""


@dataclass(frozen=True)
class _Entry:
    factory: EngineFactory
    about: str = ""  # a few words for --help


def _transformers(options: EngineOptions) -> InferenceEngine:
    from streamcap.runtime.engine import Engine

    o = options
    return Engine(o.model, o.assistant, o.device, o.threads, o.precision)


_REGISTRY: dict[str, _Entry] = {
    DEFAULT_ENGINE: _Entry(_transformers, "exact speculative decoding on transformers' Whisper"),
}


def register_engine(name: str, factory: EngineFactory, *, about: str = "") -> None:
    """Make ``name`` an engine the commands can run (a later registration replaces an
    earlier); ``about`` says what it is in a few words, for --help."""
    _REGISTRY[name] = _Entry(factory, about)


def _entry(name: str) -> _Entry:
    entry = _REGISTRY.get(name)
    if entry is None:
        raise UnknownEngine(f"unknown engine {name!r}: one of {', '.join(_REGISTRY)}")
    return entry


def engine_names() -> tuple[str, ...]:
    """The registered engines, the default (transformers) first."""
    return tuple(_REGISTRY)


def describe_engine(name: str) -> str:
    """``name`` with what it is, for --help."""
    about = _entry(name).about
    return f"{name} ({about})" if about else name


def make_engine(name: str, options: EngineOptions) -> InferenceEngine:
    """The engine registered as ``name``, its model loaded as ``options`` say; UnknownEngine
    (one line, naming the registered ones) for a name nobody registered."""
    return _entry(name).factory(options)
