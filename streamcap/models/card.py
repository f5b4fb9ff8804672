"""A model's tokenizer, special tokens and languages, without its weights.

The gateway of the Ray backend tokenizes prompts and checks languages for its streams, while the
weights live on the replicas: it loads this card (a few MB, no torch model) instead of an
`Engine`: both are a `runtime.worker_api.ModelInfo`, the few members the server and
`LiveStream` read (``spec``, ``multilingual``, ``placement``, ``main.name``, ``text_to_ids``).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from streamcap.decoding.spec import WhisperSpec
from streamcap.models.registry import resolve

__all__ = ["ModelCard"]


@dataclass(frozen=True)
class RemotePlacement:
    """Where the replicas decode, as they report it (``device`` e.g. ``ray:cpu``)."""

    device: str = "ray"
    precision: str = "?"


class ModelCard:
    """What the gateway knows of the replicas' model (see the module docstring)."""

    def __init__(self, name: str, path: str, spec: WhisperSpec) -> None:
        self.name = name
        self.path = path
        self.spec = spec
        self.main = SimpleNamespace(name=name)
        self.placement = RemotePlacement()

    @classmethod
    def load(cls, name: str) -> ModelCard:
        """The card of a bundled model, a local folder or a (cached) hub id."""
        from transformers import GenerationConfig, WhisperConfig, WhisperProcessor
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        path = resolve(name)
        processor: Any = WhisperProcessor.from_pretrained(path)
        model = SimpleNamespace(
            generation_config=GenerationConfig.from_pretrained(path),
            config=WhisperConfig.from_pretrained(path),
        )
        return cls(name, path, WhisperSpec(model, processor))

    @property
    def multilingual(self) -> bool:
        return self.spec.multilingual

    def text_to_ids(self, text: str) -> tuple[int, ...]:
        """Token ids of plain text (for prompts), as `Engine.text_to_ids` (one rule)."""
        return self.spec.text_to_ids(text)
