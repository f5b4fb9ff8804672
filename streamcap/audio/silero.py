"""Silero VAD (v5/v6, the `silero-vad` wheel's TorchScript model) behind the segmenter's VAD
interface: a callable per frame, (16-bit PCM bytes, sample rate) -> voiced.

The model reads 512-sample chunks at 16 kHz and keeps a recurrent state, so frames are buffered,
every complete chunk is run, and each frame answers the latest chunk's speech probability against
the threshold. One instance per stream (its state is that stream's); the model is loaded from the
wheel's own data folder, never downloaded. Torch's thread settings are left as they are.
"""

from __future__ import annotations

import copy
import importlib.util
import threading
import warnings
from importlib import resources
from typing import Any

import numpy as np

from streamcap.errors import UserError

CHUNK = 512  # samples per model call at 16 kHz (Silero v5+)
RATE = 16000


class SileroMissing(UserError):
    """`--vad silero` without the `silero-vad` package."""


_lock = threading.Lock()
_prototype: Any = None


def new_model() -> Any:
    """A fresh model with its own state: a copy of the process's one loaded model (a copy is
    ~10 ms, a load ~160 ms)."""
    global _prototype
    with _lock:
        if _prototype is None:
            _prototype = _load_model()
        return copy.deepcopy(_prototype)


def _load_model() -> Any:
    if importlib.util.find_spec("silero_vad") is None:
        raise SileroMissing(
            "--vad silero needs the silero-vad package: pip install 'streamcap[silero]'"
        )
    import torch

    path = resources.files("silero_vad.data").joinpath("silero_vad.jit")
    with resources.as_file(path) as f, warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # torch 2.13: "use torch.export"
        model = torch.jit.load(str(f), map_location="cpu")
    model.eval()
    return model


class SileroVad:
    """Per-frame Silero decisions for one stream (call `reset` to start a new one)."""

    def __init__(self, threshold: float = 0.5, model: Any = None) -> None:
        if not 0.0 < threshold < 1.0:
            raise ValueError("threshold must be in (0, 1)")
        self.threshold = threshold
        self._model = model if model is not None else new_model()
        self._buf = np.zeros(0, dtype=np.float32)
        self.prob = 0.0  #: the latest chunk's speech probability
        self.reset()

    def reset(self) -> None:
        self._model.reset_states()
        self._buf = np.zeros(0, dtype=np.float32)
        self.prob = 0.0

    def __call__(self, pcm: bytes, sample_rate: int) -> bool:
        if sample_rate != RATE:
            raise ValueError(f"Silero VAD here runs at {RATE} Hz, got {sample_rate}")
        import torch

        x = np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768.0
        buf = np.concatenate([self._buf, x])
        n = len(buf) // CHUNK
        if n:
            with torch.inference_mode():
                for i in range(n):
                    chunk = torch.from_numpy(buf[i * CHUNK : (i + 1) * CHUNK].copy())
                    self.prob = float(self._model(chunk, RATE).item())
        self._buf = buf[n * CHUNK :]
        return self.prob >= self.threshold
