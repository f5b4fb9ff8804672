"""streamcap: real-time streaming Whisper captioner with exact speculative decoding.

The public API, by layer (CONTRIBUTING.md)::

    from streamcap import Engine, InferenceWorker, LiveStream, LiveConfig

    worker = InferenceWorker(Engine("base")).start()
    stream = LiveStream("mic", worker, on_caption=print)

Names are imported on first use (PEP 562), so ``import streamcap`` stays light: no torch, no
transformers, no sound library until a model, a stream or a server is asked for.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

#: public name -> the module that defines it
_EXPORTS = {
    "Caption": "streamcap.core.captions",
    "CaptionEvent": "streamcap.core.captions",
    "DecodingOptions": "streamcap.core.decode_types",
    "Engine": "streamcap.runtime.engine",
    "InferenceWorker": "streamcap.runtime.worker",
    "LiveConfig": "streamcap.core.live_config",
    "LiveStream": "streamcap.runtime.stream",
    "TranscribeOptions": "streamcap.runtime.transcribe",
    "Transcription": "streamcap.runtime.transcribe",
    "CaptionServer": "streamcap.server.app",
    "ServerConfig": "streamcap.server.config",
}

__all__ = ["__version__", *sorted(_EXPORTS)]

if TYPE_CHECKING:  # what the names are, for type checkers; imported lazily at run time
    from streamcap.core.captions import Caption as Caption
    from streamcap.core.captions import CaptionEvent as CaptionEvent
    from streamcap.core.decode_types import DecodingOptions as DecodingOptions
    from streamcap.core.live_config import LiveConfig as LiveConfig
    from streamcap.runtime.engine import Engine as Engine
    from streamcap.runtime.stream import LiveStream as LiveStream
    from streamcap.runtime.transcribe import TranscribeOptions as TranscribeOptions
    from streamcap.runtime.transcribe import Transcription as Transcription
    from streamcap.runtime.worker import InferenceWorker as InferenceWorker
    from streamcap.server.app import CaptionServer as CaptionServer
    from streamcap.server.config import ServerConfig as ServerConfig


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this hook
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
