"""The voice detectors a segmenter can use, by name: the VAD port and its registry.

A VAD is the segmenter's one question about a frame (`core.segmenter.VadFn`: 16-bit PCM bytes
and the sample rate in, voiced or not out), so a new detector is a function that builds one
from a `SegmenterConfig`, registered here under its name (`register_vad`) with a few words on
what it is and the package it needs, if any; the command line's choices, help and "install
this" message come from here (`vad_names`, `describe_vad`, `check_vad`), and
`SegmenterConfig.vad` names one. The core never imports this module (a detector may need torch:
Silero); the runtime builds a stream's detector with `make_vad` and hands it to the segmenter.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass

from streamcap.core.segmenter import SegmenterConfig, VadFn
from streamcap.errors import UserError

__all__ = [
    "UnknownVad",
    "VadFactory",
    "VadUnavailable",
    "check_vad",
    "describe_vad",
    "make_vad",
    "register_vad",
    "vad_names",
]

#: Builds one stream's detector (detectors keep state: one per stream).
VadFactory = Callable[[SegmenterConfig], VadFn]


class UnknownVad(UserError, ValueError):
    """A VAD name nobody registered."""


class VadUnavailable(UserError):
    """A registered VAD whose package is not installed."""


@dataclass(frozen=True)
class _Entry:
    factory: VadFactory
    about: str = ""  # a few words for --help
    module: str | None = None  # a module it needs, importable or not
    install: str = ""  # how to get that module


def _webrtc(config: SegmenterConfig) -> VadFn:
    import webrtcvad

    is_speech: VadFn = webrtcvad.Vad(config.aggressiveness).is_speech
    return is_speech


def _silero(config: SegmenterConfig) -> VadFn:
    from streamcap.audio.silero import SileroVad

    return SileroVad(config.silero_threshold)


_REGISTRY: dict[str, _Entry] = {
    "webrtc": _Entry(_webrtc),
    "silero": _Entry(
        _silero,
        "a small neural VAD",
        "silero_vad",
        "the silero extra: pip install 'streamcap[silero]'",
    ),
}


def register_vad(
    name: str, factory: VadFactory, *, about: str = "", module: str | None = None, install: str = ""
) -> None:
    """Make ``name`` a VAD a segmenter can use (a later registration replaces an earlier):
    ``about`` says what it is in a few words, ``module`` is a module it needs (checked before
    any model loads) and ``install`` how to get it."""
    _REGISTRY[name] = _Entry(factory, about, module, install)


def _entry(name: str) -> _Entry:
    entry = _REGISTRY.get(name)
    if entry is None:
        raise UnknownVad(f"unknown VAD {name!r}: one of {', '.join(_REGISTRY)}")
    return entry


def describe_vad(name: str) -> str:
    """``name`` with what it is and what it needs, for --help."""
    e = _entry(name)
    words = "; ".join(x for x in (e.about, f"needs {e.install}" if e.module else "") if x)
    return f"{name} ({words})" if words else name


def check_vad(name: str) -> None:
    """UnknownVad, or VadUnavailable (one line: what to install) when ``name`` cannot run here."""
    e = _entry(name)
    if e.module is not None and importlib.util.find_spec(e.module) is None:
        raise VadUnavailable(f"--vad {name} needs the {e.module} module: {e.install}")


def vad_names() -> tuple[str, ...]:
    """The registered VADs, the default (webrtc) first."""
    return tuple(_REGISTRY)


def make_vad(config: SegmenterConfig) -> VadFn:
    """A new detector for one stream, of the kind ``config.vad`` names."""
    return _entry(config.vad).factory(config)
